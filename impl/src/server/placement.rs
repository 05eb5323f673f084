//! Where an allocation may go: the ready nodes whose datacenter the job names and whose
//! attributes meet its constraints (job, group and tasks), and the ports its group's
//! network asks for, free on that node.

use super::store::StateStore;
use super::structs::{AllocatedPort, Node, NodeId};
use crate::spec::{Constraint, Job, TaskGroup};
use std::collections::BTreeSet;

/// Nomad's default range for dynamic ports.
pub const MIN_DYNAMIC_PORT: u16 = 20000;
pub const MAX_DYNAMIC_PORT: u16 = 32000;

/// A glob of Nomad's datacenters (`*` matches any run of characters).
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|&i| tail.is_char_boundary(i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

/// The value of a constraint's target on `node`, if it has one.
fn target(node: &Node, target: &str) -> Option<String> {
    let name = target.strip_prefix("${")?.strip_suffix('}')?;
    if let Some(attr) = name.strip_prefix("attr.") {
        return node.attributes.get(attr).cloned();
    }
    match name {
        "node.datacenter" => Some(node.datacenter.clone()),
        "node.unique.id" => Some(node.id.clone()),
        "node.unique.name" => Some(node.name.clone()),
        "node.pool" => Some(node.node_pool.clone()),
        "node.class" => Some(String::new()),
        _ => None, // node meta: the node has none
    }
}

fn meets(node: &Node, constraint: &Constraint) -> bool {
    let left = target(node, &constraint.l_target);
    let right = &constraint.r_target;
    match constraint.operand.as_str() {
        "" | "=" | "==" | "is" => left.as_ref() == Some(right),
        "!=" | "not" => left.as_ref() != Some(right),
        "is_set" => left.is_some(),
        "is_not_set" => left.is_none(),
        // `validate` refuses every other operand.
        _ => false,
    }
}

/// Whether `group` of `job` may run on `node` (a node with no record — the simulator's —
/// takes anything that has no constraints).
pub fn feasible(store: &StateStore, node: &NodeId, job: &Job, group: &TaskGroup) -> bool {
    let constraints: Vec<&Constraint> = job
        .constraints
        .iter()
        .flatten()
        .chain(group.constraints.iter().flatten())
        .chain(
            group
                .tasks
                .iter()
                .flat_map(|t| t.constraints.iter().flatten()),
        )
        .collect();
    let Some(node) = store.node(node) else {
        return constraints.is_empty();
    };
    job.datacenters.iter().any(|dc| glob(dc, &node.datacenter))
        && constraints.iter().all(|c| meets(node, c))
}

/// The group's ports on `node`: each reserved one if no live allocation there holds it, and
/// each dynamic one the lowest free in the dynamic range; `None` if any cannot be had.
/// `taken` holds the ports placed in the same plan.
pub fn assign_ports(
    store: &StateStore,
    node: &NodeId,
    group: &TaskGroup,
    taken: &mut BTreeSet<(NodeId, u16)>,
) -> Option<Vec<AllocatedPort>> {
    let in_use: BTreeSet<u16> = store
        .allocs()
        .filter(|a| &a.node_id == node && !a.is_terminal())
        .flat_map(|a| a.ports.iter().map(|p| p.value))
        .chain(taken.iter().filter(|(n, _)| n == node).map(|(_, p)| *p))
        .collect();
    let mut mine = BTreeSet::new();
    let mut ports = Vec::new();
    for network in group.networks.iter().flatten() {
        for port in network.reserved_ports.iter().flatten() {
            let value = u16::try_from(port.value).ok()?;
            if in_use.contains(&value) || !mine.insert(value) {
                return None;
            }
            ports.push(AllocatedPort {
                label: port.label.clone(),
                value,
                to: port.to,
            });
        }
    }
    for network in group.networks.iter().flatten() {
        for port in network.dynamic_ports.iter().flatten() {
            let value = (MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT)
                .find(|p| !in_use.contains(p) && !mine.contains(p))?;
            mine.insert(value);
            ports.push(AllocatedPort {
                label: port.label.clone(),
                value,
                to: port.to,
            });
        }
    }
    taken.extend(mine.into_iter().map(|p| (node.clone(), p)));
    Some(ports)
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn datacenter_globs() {
        for (pattern, text, matches) in [
            ("*", "dc1", true),
            ("dc1", "dc1", true),
            ("dc*", "dc1", true),
            ("*1", "dc1", true),
            ("d*1", "dc21", true),
            ("dc2", "dc1", false),
            ("east-*", "dc1", false),
        ] {
            assert_eq!(glob(pattern, text), matches, "{pattern} {text}");
        }
    }
}
