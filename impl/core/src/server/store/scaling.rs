//! The scaling events table: each job's [`JobScalingEvents`], by task group, newest first
//! (Nomad's `scaling_event` table and `UpsertScalingEvent`). A job's events go with the
//! job (a purge, a collection), as Nomad's `DeleteJobTxn` deletes them.

use super::{Record, StateStore};
use crate::server::scaling::{JobScalingEvents, ScalingEvent, JOB_TRACKED_SCALING_EVENTS};
use std::sync::Arc;

impl StateStore {
    /// A job's scaling events, if any were recorded since it was registered.
    pub fn scaling_events(&self, job_id: &str) -> Option<&JobScalingEvents> {
        self.scaling_events.get(job_id)
    }

    /// Records `event` as `group`'s newest, keeping [`JOB_TRACKED_SCALING_EVENTS`]. The
    /// events of groups the job no longer has are dropped, so a job's events are bounded
    /// by its groups (Nomad keeps them, though its API shows only the job's groups).
    pub(in crate::server) fn put_scaling_event(
        &mut self,
        job_id: &str,
        group: &str,
        event: ScalingEvent,
    ) {
        debug_assert_eq!(event.create_index, self.index, "recorded in its own write");
        self.wrote(Record::ScalingEvents(job_id.into()));
        let groups: Vec<String> = self
            .job(job_id)
            .map(|job| job.task_groups.iter().map(|g| g.name.clone()).collect())
            .unwrap_or_default();
        debug_assert!(groups.iter().any(|g| g == group), "{group} is {job_id}'s");
        let recorded = Arc::make_mut(&mut self.scaling_events)
            .entry(job_id.into())
            .or_insert_with(|| JobScalingEvents {
                job_id: job_id.into(),
                ..JobScalingEvents::default()
            });
        recorded.modify_index = event.create_index;
        recorded
            .scaling_events
            .retain(|name, _| groups.contains(name));
        let events = recorded
            .scaling_events
            .entry(group.to_string())
            .or_default();
        events.insert(0, event);
        events.truncate(JOB_TRACKED_SCALING_EVENTS);
    }

    /// Deletes a job's scaling events (its purge or collection).
    pub(super) fn delete_scaling_events(&mut self, job_id: &str) {
        if self.scaling_events.contains_key(job_id) {
            Arc::make_mut(&mut self.scaling_events).remove(job_id);
            self.wrote(Record::ScalingEvents(job_id.into()));
        }
    }

    /// Restored events, each group cut to [`JOB_TRACKED_SCALING_EVENTS`] (a store written
    /// with a larger bound keeps its newest).
    pub(super) fn restore_scaling_events(&mut self, restored: Vec<JobScalingEvents>) {
        for mut job in restored {
            for events in job.scaling_events.values_mut() {
                events.truncate(JOB_TRACKED_SCALING_EVENTS);
            }
            Arc::make_mut(&mut self.scaling_events).insert(job.job_id.clone(), job);
        }
    }
}
