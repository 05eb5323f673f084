//! The scheduler's side of the server: nodes that turn ready, evaluations processed into
//! plans (placements all or none), and blocked evaluations that wait for a node or for
//! ports and are tried again.
//!
//! An evaluation that cannot place completes with `QueuedAllocations` and leaves a blocked
//! evaluation (`queued-allocs`, linked both ways), which goes back to the broker when a
//! node turns ready or an allocation's end frees its ports, and which a newer evaluation of
//! its job cancels, as Nomad's blocked-evals tracker does. The event log records an
//! evaluation when it is processed with its placements, so for the model it stays pending
//! until then.

use super::*;
use std::sync::Arc;

impl Server {
    /// Registers or updates a client node, in one write. A node that is ready takes
    /// placements from now on, and every blocked evaluation goes back to the broker, as
    /// Nomad unblocks them when a node's capacity changes.
    pub fn upsert_node(&mut self, mut node: Node) -> u64 {
        let kind = if self.store.node(&node.id).is_some() {
            WriteType::NodeUpdate
        } else {
            WriteType::NodeRegister
        };
        let index = self.store.next_index(kind);
        node.create_index = self
            .store
            .node(&node.id)
            .map_or(index, |old| old.create_index);
        node.modify_index = index;
        for event in node.events.iter_mut().filter(|e| e.create_index == 0) {
            event.create_index = index;
        }
        let ready = node.is_ready();
        if ready && !self.nodes.contains(&node.id) {
            self.nodes.push(node.id.clone());
        } else if !ready {
            self.nodes.retain(|id| id != &node.id);
        }
        self.store.put_node(node);
        if ready {
            self.unblock(index, false);
        }
        index
    }

    /// Blocked evaluations back to the broker, oldest first: every one, or (`ports_only`)
    /// those that lacked ports.
    pub(super) fn unblock(&mut self, index: u64, ports_only: bool) {
        let (woken, kept): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.blocked)
            .into_iter()
            .partition(|(_, (_, for_ports))| *for_ports || !ports_only);
        self.blocked = kept;
        let mut blocked: Vec<(u64, EvalId, JobId)> = woken
            .into_iter()
            .filter_map(|(job, (id, _))| Some((self.store.eval(&id)?.create_index, id, job)))
            .collect();
        blocked.sort();
        for (_, id, job) in blocked {
            if let Some(eval) = self.store.eval_mut(&id) {
                eval.status = EvalStatus::Pending;
                eval.modify_index = index;
            }
            self.broker.enqueue(&job, &id);
        }
    }

    /// The scheduler processes the next pending evaluation: reconcile its job and apply the
    /// plan in one write. Returns what it did, or `None` when none is pending.
    pub fn process_next_eval(&mut self) -> Result<Option<Processed>, ServerError> {
        let Some(job) = self.broker.next_job().cloned() else {
            return Ok(None);
        };
        let Some(eval_id) = self.broker.dequeue() else {
            return Ok(None);
        };
        let processed = |blocked| Processed {
            eval: eval_id.clone(),
            job: job.clone(),
            blocked,
        };
        let Some(eval) = self.store.eval(&eval_id).cloned() else {
            return Ok(Some(processed(false)));
        };
        let plan = scheduler::reconcile(&self.store, &eval.job_id);
        let index = self.store.next_index(WriteType::Plan);
        let (queued, for_ports) = self.apply_plan(plan, &eval, index);
        if queued.is_empty() {
            if let Some(stored) = self.store.eval_mut(&eval_id) {
                stored.status = EvalStatus::Complete;
                stored.modify_index = index;
                stored.queued_allocations = queued;
            }
            return Ok(Some(processed(false)));
        }
        if eval.triggered_by == TRIGGER_QUEUED {
            // A blocked evaluation that still cannot place blocks again, itself (Nomad's
            // reblock): no new record each time it is tried.
            if let Some(stored) = self.store.eval_mut(&eval_id) {
                stored.status = EvalStatus::Blocked;
                stored.modify_index = index;
                stored.queued_allocations = queued;
            }
            self.blocked
                .insert(eval.job_id.clone(), (eval_id.clone(), for_ports));
            return Ok(Some(processed(true)));
        }
        let blocked = self.block(&eval, &queued, for_ports, index);
        // As Nomad's worker: the blocked evaluation is created in one write, the evaluation
        // marked complete (linked to it) in the next, so each shows in its own index.
        let index = self.store.next_index(WriteType::Plan);
        if let Some(stored) = self.store.eval_mut(&eval_id) {
            stored.status = EvalStatus::Complete;
            stored.modify_index = index;
            stored.queued_allocations = queued;
            stored.blocked_eval = blocked;
        }
        Ok(Some(processed(true)))
    }

    /// Leaves a blocked evaluation for what `eval` could not place (Nomad's
    /// `queued-allocs`).
    fn block(
        &mut self,
        eval: &Evaluation,
        queued: &BTreeMap<String, u64>,
        for_ports: bool,
        index: u64,
    ) -> EvalId {
        let mut blocked = eval.clone();
        blocked.id = self.ids.uuid();
        blocked.status = EvalStatus::Blocked;
        blocked.status_description = "created to place remaining allocations".into();
        blocked.triggered_by = TRIGGER_QUEUED.into();
        blocked.previous_eval = eval.id.clone();
        blocked.blocked_eval = String::new();
        blocked.queued_allocations = queued.clone();
        blocked.create_index = index;
        blocked.modify_index = index;
        let id = blocked.id.clone();
        self.blocked
            .insert(eval.job_id.clone(), (id.clone(), for_ports));
        self.store.put_eval(blocked);
        id
    }

    // invariant: flag_scoped
    /// Applies a plan's stops and in-place updates, and its placements if every one of them
    /// has a node (and its ports); returns how many allocations of each group it did not
    /// place (none, or all), and whether ports were what some lacked.
    fn apply_plan(
        &mut self,
        plan: scheduler::Plan,
        eval: &Evaluation,
        index: u64,
    ) -> (BTreeMap<String, u64>, bool) {
        for (id, description) in plan.stop {
            // The stop preserves the transition, and so the flag (§1.6 "Flag survives").
            self.store.update_alloc(&id, index, true, |alloc| {
                alloc.desired_status = DesiredStatus::Stop;
                alloc.desired_description = description.to_string();
            });
        }
        if let Some(done) = &plan.deployment_done {
            self.deployment_done(done, index);
        }
        if !plan.in_place.is_empty() {
            let job = self
                .store
                .job(&eval.job_id)
                .map(|job| Arc::new(job.clone()));
            for id in &plan.in_place {
                if let Some(job) = &job {
                    // The server's record only: the client runs the same tasks.
                    self.store.update_alloc(id, index, false, |alloc| {
                        alloc.job_version = job.version;
                        alloc.job = Arc::clone(job);
                    });
                }
            }
        }
        let mut queued = BTreeMap::new();
        if plan.place.is_empty() {
            return (queued, false);
        }
        if self.nodes.is_empty() {
            for placement in plan.place {
                *queued.entry(placement.group).or_insert(0) += 1;
            }
            return (queued, false);
        }
        let mut load: BTreeMap<NodeId, usize> =
            self.nodes.iter().map(|node| (node.clone(), 0)).collect();
        for alloc in self.store.allocs().filter(|a| !a.is_terminal()) {
            if let Some(count) = load.get_mut(&alloc.node_id) {
                *count += 1;
            }
        }
        // Every placement's node and ports first: all of them, or none (an evaluation that
        // cannot place everything places nothing and blocks, so the event log, which
        // records it only once it places, never shows half a plan).
        let mut taken = std::collections::BTreeSet::new();
        let mut chosen = Vec::new();
        let mut for_ports = false;
        for placement in &plan.place {
            let job = &placement.job;
            let Some(group) = job.task_groups.iter().find(|g| g.name == placement.group) else {
                continue;
            };
            // The least loaded node that can take it, and its ports there.
            let mut nodes: Vec<(NodeId, usize)> = load
                .iter()
                .filter(|(node, _)| placement::feasible(&self.store, node, job, group))
                .map(|(node, count)| (node.clone(), *count))
                .collect();
            nodes.sort_by_key(|(node, count)| (*count, node.clone()));
            let found = nodes.into_iter().find_map(|(node, _)| {
                placement::assign_ports(&self.store, &node, job, group, &mut taken)
                    .map(|ports| (node, ports))
            });
            match found {
                Some((node, ports)) => {
                    *load.get_mut(&node).expect("a node of the load") += 1;
                    chosen.push(Some((node, ports)));
                }
                None => {
                    // A node fits but its ports are taken: an allocation's end may free them.
                    for_ports |= placement::feasible_anywhere(&self.store, &load, job, group);
                    chosen.push(None);
                }
            }
        }
        if chosen.iter().any(Option::is_none) {
            for placement in plan.place {
                *queued.entry(placement.group).or_insert(0) += 1;
            }
            return (queued, for_ports);
        }
        let mut placed = Vec::new();
        for (placement, (node, ports)) in plan.place.into_iter().zip(chosen.into_iter().flatten()) {
            let job = placement.job;
            let alloc = Allocation {
                id: self.ids.uuid().into(),
                namespace: job.namespace.clone(),
                eval_id: eval.id.clone(),
                name: format!("{}.{}[{}]", job.id, placement.group, placement.index),
                node_id: node,
                job_id: job.id.as_str().into(),
                job_version: job.version,
                task_group: placement.group.as_str().into(),
                desired_status: DesiredStatus::Run,
                desired_description: String::new(),
                // flag_scoped: a new allocation never carries the flag.
                desired_transition: DesiredTransition::default(),
                client_status: ClientStatus::Pending,
                client_description: String::new(),
                task_states: TaskStates::default(),
                previous_allocation: placement.previous.clone(),
                next_allocation: None,
                create_index: index,
                modify_index: index,
                alloc_modify_index: index,
                // Stamped by the store.
                create_time: 0,
                modify_time: 0,
                ports,
                tombstone: false,
                deployment_id: placement.deployment.clone().unwrap_or_default(),
                // A canary says so from its placement (Nomad's `DeploymentStatus.Canary`).
                deployment_status: placement.canary.then(|| AllocDeploymentStatus {
                    canary: true,
                    ..AllocDeploymentStatus::default()
                }),
                job: Arc::clone(&job),
            };
            if let Some(previous) = &placement.previous {
                let next = alloc.id.clone();
                self.store.update_alloc(previous, index, false, |old| {
                    old.next_allocation = Some(next)
                });
            }
            if let Some(deployment) = &placement.deployment {
                let canary = placement.canary.then_some(alloc.id.as_str());
                self.deployment_placed(deployment, &placement.group, canary, index);
            }
            placed.push(alloc.id.clone());
            self.store.put_alloc(alloc);
        }
        for id in placed {
            self.store.update_alloc(&id, index, true, |_| {});
        }
        (queued, false)
    }
}
