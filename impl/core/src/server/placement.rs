//! Where an allocation may go: the ready nodes whose datacenter the job names and whose
//! attributes meet its constraints (job, group and tasks), and the ports its group's
//! network asks for, free on that node.
//!
//! A port is free only of every allocation whose client still runs it: a stopping one in
//! its delay holds its ports (Nomad's `TestOverlap`, #10440), and a placement that cannot
//! have them blocks its evaluation until an allocation's end frees one. Unlike Nomad, which
//! gives a replacement its predecessor's static port in the stop's own plan, a replacement
//! on the same node waits for its predecessor to end, and a count of N places all or
//! nothing.

use super::store::StateStore;
use super::structs::{AllocatedPort, Node, NodeId};
use crate::spec::{Constraint, Job, TaskGroup};
use std::collections::BTreeSet;

/// Nomad's default range for dynamic ports.
pub const MIN_DYNAMIC_PORT: u16 = 20000;
pub const MAX_DYNAMIC_PORT: u16 = 32000;

/// A glob of Nomad's datacenters (`*` matches any run of characters): the iterative
/// match, linear in the text for each star (no backtracking recursion: `validate` bounds
/// the patterns, and this never recurses whatever they are).
fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), text.chars().collect());
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// The value of a constraint's target on `node`, if it has one.
fn target(node: &Node, target: &str) -> Option<String> {
    let name = target.strip_prefix("${")?.strip_suffix('}')?;
    if let Some(attr) = name.strip_prefix("attr.") {
        return node.attributes.get(attr).cloned();
    }
    match name {
        "node.datacenter" => Some(node.datacenter.clone()),
        "node.unique.id" => Some(node.id.to_string()),
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

/// Whether some node of `nodes` meets the group's constraints (its ports aside).
pub fn feasible_anywhere<T>(
    store: &StateStore,
    nodes: &std::collections::BTreeMap<NodeId, T>,
    job: &Job,
    group: &TaskGroup,
) -> bool {
    nodes.keys().any(|node| feasible(store, node, job, group))
}

/// The group's ports on `node`, each free of every allocation whose tasks may still run
/// there — a stopping one in its delay included (Nomad since #10440, its `TestOverlap`): a
/// reserved one as asked, a dynamic one the first free in the dynamic range from where
/// [`dynamic_start`] puts the port, wrapping around; `None` if any
/// cannot be had, and the evaluation blocks until an allocation's end frees a port. So a
/// new allocation never listens where a stopping one still does, and a flagged stop, which
/// skips the delay, frees its ports at once. Unlike Nomad, which hands a replacement its
/// predecessor's static port in the stop's own plan, a replacement on the same node waits
/// for its predecessor to end. `taken` holds the ports placed in the same plan.
pub fn assign_ports(
    store: &StateStore,
    node: &NodeId,
    job: &Job,
    group: &TaskGroup,
    taken: &mut BTreeSet<(NodeId, u16)>,
) -> Option<Vec<AllocatedPort>> {
    let on_node: Vec<_> = store
        .allocs_for_node(node)
        .filter(|a| !a.client_status.is_terminal())
        .collect();
    let planned = taken.iter().filter(|(n, _)| n == node).map(|(_, p)| *p);
    let held: BTreeSet<u16> = on_node
        .iter()
        .flat_map(|a| a.ports.iter().map(|p| p.value))
        .chain(planned)
        .collect();
    let mut mine = BTreeSet::new();
    let mut ports = Vec::new();
    for network in group.networks.iter().flatten() {
        for port in network.reserved_ports.iter().flatten() {
            let value = u16::try_from(port.value).ok()?;
            if held.contains(&value) || !mine.insert(value) {
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
            let span = u32::from(MAX_DYNAMIC_PORT - MIN_DYNAMIC_PORT) + 1;
            let start = dynamic_start(node, job, group, &port.label);
            let value = (0..span)
                .map(|i| MIN_DYNAMIC_PORT + ((start + i) % span) as u16)
                .find(|p| !held.contains(p) && !mine.contains(p))?;
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

/// Where in the dynamic range the search for a port starts: its offset from
/// [`MIN_DYNAMIC_PORT`], a hash (FNV-1a) of the node, the job, the group and the port's
/// label. Nomad picks dynamic ports at random; the lowest free one, which this was, gave
/// every agent on one host the same first port, so two agents' tasks listened on one port
/// and a check could reach the other's. A hash spreads them as randomness would, and the
/// simulator, which has no randomness, places the same ports for the same state.
fn dynamic_start(node: &NodeId, job: &Job, group: &TaskGroup, label: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [node.as_str(), &job.id, &group.name, label] {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (hash % (u64::from(MAX_DYNAMIC_PORT - MIN_DYNAMIC_PORT) + 1)) as u32
}

#[cfg(test)]
mod tests {
    use super::glob;

    /// Two dynamic ports of one group take distinct ports: with every port held but the
    /// first label's start and the one after it, each label takes one of the two. With
    /// every port from the start to the range's end held, the search wraps around to the
    /// range's first.
    #[test]
    fn a_dynamic_port_search_takes_distinct_ports_and_wraps_around_the_range() {
        use super::{assign_ports, dynamic_start, MAX_DYNAMIC_PORT, MIN_DYNAMIC_PORT};
        use crate::server::store::StateStore;
        use crate::server::structs::NodeId;
        use crate::spec::{Job, Network, Port, TaskGroup};
        use std::collections::BTreeSet;
        let node = NodeId::from("n1");
        let job = Job {
            id: "web".into(),
            ..Job::default()
        };
        let group_of = |labels: &[&str]| TaskGroup {
            name: "g".into(),
            networks: Some(vec![Network {
                dynamic_ports: Some(
                    labels
                        .iter()
                        .map(|label| Port {
                            label: label.to_string(),
                            ..Port::default()
                        })
                        .collect(),
                ),
                ..Network::default()
            }]),
            ..TaskGroup::default()
        };
        let store = StateStore::default();
        let two = group_of(&["a", "b"]);
        let first = MIN_DYNAMIC_PORT + dynamic_start(&node, &job, &two, "a") as u16;
        assert!(
            first > MIN_DYNAMIC_PORT && first < MAX_DYNAMIC_PORT,
            "{first}"
        );
        let held = |free: &[u16]| -> BTreeSet<_> {
            (MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT)
                .filter(|p| !free.contains(p))
                .map(|p| (node.clone(), p))
                .collect()
        };
        let ports = assign_ports(&store, &node, &job, &two, &mut held(&[first, first + 1]))
            .expect("two ports free for two labels");
        let values: Vec<u16> = ports.iter().map(|p| p.value).collect();
        assert_eq!(values, [first, first + 1]);
        // Held from the start on (another allocation of the same plan, say): wrap around.
        let mut taken: BTreeSet<_> = (first..=MAX_DYNAMIC_PORT)
            .map(|p| (node.clone(), p))
            .collect();
        let wrapped = assign_ports(&store, &node, &job, &group_of(&["a"]), &mut taken)
            .expect("the search wraps");
        assert_eq!(
            wrapped[0].value, MIN_DYNAMIC_PORT,
            "{wrapped:?} after {first}"
        );
    }

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
            ("**1*", "dc1", true),
            ("d*c", "dc1", false),
        ] {
            assert_eq!(glob(pattern, text), matches, "{pattern} {text}");
        }
        // What a hostile pattern cannot do: take time, or the stack.
        let many = "*".repeat(20_000) + "X";
        let started = std::time::Instant::now();
        assert!(!glob(&many, "dc1"));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
