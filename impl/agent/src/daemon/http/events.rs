//! `/v1/event/stream`: the server's writes as Nomad's event stream publishes them
//! (`server/events.rs` keeps the journal). Newline-delimited JSON: `{}` at once and every
//! [`HEARTBEAT`] while nothing else is sent, and for each write that changed a record the
//! subscriber asked for, `{"Index": N, "Events": [...]}` in index order.
//!
//! The query: `index` (the first index wanted; a part no longer kept starts at the oldest
//! kept, as Nomad's), `topic` (repeatable, `Topic` or `Topic:key`, a key matching a
//! record's ID or its filter keys, `*` every one; none: every topic, which needs a
//! management token as in Nomad), `namespace` (`*`: all). What a topic needs of the token
//! is Nomad's: `read-job` for allocations, jobs, evaluations, deployments and services,
//! `node:read` for nodes, a management token for the rest. A malformed query is a 400
//! naming what is wrong, a topic Nomad does not have included.
//!
//! Every look at the journal checks the token again, so a deleted token ends its streams;
//! a subscriber that falls so far behind that the journal dropped what it had not read
//! yet has its stream ended (it resubscribes from the last index it got, and is never
//! silently skipped ahead); at most [`MAX_STREAMS`] streams run at once.
//!
//! Where it differs from Nomad: a topic Nomad does not have, an empty key or a malformed
//! index is a 400 (Nomad takes them); `*` among several keys matches every key (Nomad's
//! filter then matches it literally); a purged job's allocations are published until their
//! client ends them (Nomad 1.7.3 and later deletes them in the purge); only allocations,
//! jobs, evaluations, services and nodes carry events; the journal keeps 16,384 events
//! (Nomad's `event_buffer_size` counts 100 indexes by default). A stopping agent ends its
//! streams cleanly first, so Nomad's Go client reads the end of a stream, not a broken
//! connection.

use super::*;
use quiesce_core::server::events::{Event, Since, Snapshot};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most event streams at once.
pub const MAX_STREAMS: usize = 64;
/// How often a stream with nothing to send says it is alive (Nomad's 30 s).
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// The most `topic` parameters a subscription takes.
const MAX_TOPICS: usize = 64;
/// The most batches taken from the journal at one look (the rest at the next, at once).
const BATCHES_A_LOOK: usize = 256;

static STREAMS: AtomicUsize = AtomicUsize::new(0);
/// Ends every event stream of the agent, cleanly (each body's last chunk sent, so that a
/// subscriber reads the end of its stream rather than a broken connection), and waits (at
/// most a second) until they have ended: the agent is stopping.
pub fn end_all(shared: &Shared) {
    shared.stopping.store(true, Ordering::SeqCst);
    shared.wake_readers();
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while STREAMS.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The last chunks written out.
    std::thread::sleep(Duration::from_millis(20));
}

/// Nomad's topics (`nomad/structs/event.go`, read for facts). This agent publishes
/// events of the first five; a subscription to the others is taken and gets none.
const TOPICS: [&str; 17] = [
    "Allocation",
    "Job",
    "Evaluation",
    "Service",
    "Node",
    "Deployment",
    "NodePool",
    "ACLPolicy",
    "ACLToken",
    "ACLRole",
    "ACLAuthMethod",
    "ACLBindingRule",
    "HostVolume",
    "CSIVolume",
    "CSIPlugin",
    "Operator",
    "Variable",
];

/// What a subscriber asked for.
#[derive(Debug, PartialEq)]
pub(super) struct Subscription {
    index: u64,
    /// Topic (`*`: every one) → the keys asked for (`*`: every key).
    topics: BTreeMap<String, Vec<String>>,
    /// `*`: every namespace.
    namespace: String,
}

/// Whether the request subscribes to the event stream.
pub(super) fn streams(request: &ApiRequest) -> bool {
    request.method == Method::Get && split_url(&request.url).0 == "/v1/event/stream"
}

pub(super) fn parse(query: &Query) -> Result<Subscription, ApiError> {
    let index = match query.get("index") {
        None | Some("") => 0,
        Some(text) => text.parse::<u64>().map_err(|_| {
            error(
                400,
                format!(
                    "Unable to parse index: {:?} is not a whole number",
                    shorten(text)
                ),
            )
        })?,
    };
    let mut topics: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (count, asked) in query.all("topic").enumerate() {
        if count == MAX_TOPICS {
            return Err(error(
                400,
                format!("Invalid topic query: at most {MAX_TOPICS} topics"),
            ));
        }
        let parts: Vec<&str> = asked.split(':').collect();
        let (topic, key) = match parts.as_slice() {
            [topic] => (*topic, "*"),
            [topic, key] => (*topic, *key),
            _ => {
                return Err(error(
                    400,
                    format!(
                        "Invalid topic query: error parsing topics: Invalid key value pair \
                         for topic, topic: {}",
                        shorten(asked)
                    ),
                ))
            }
        };
        if topic != "*" && !TOPICS.contains(&topic) {
            return Err(error(
                400,
                format!(
                    "Invalid topic query: unknown topic {:?} (Nomad's topics: {}, or * for all)",
                    shorten(topic),
                    TOPICS.join(", ")
                ),
            ));
        }
        if key.is_empty() {
            return Err(error(
                400,
                format!("Invalid topic query: topic {topic:?} has an empty key"),
            ));
        }
        topics
            .entry(topic.to_string())
            .or_default()
            .push(key.to_string());
    }
    if topics.is_empty() {
        topics.insert("*".into(), vec!["*".into()]);
    }
    let namespace = query
        .get("namespace")
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    Ok(Subscription {
        index,
        topics,
        namespace,
    })
}

fn shorten(text: &str) -> String {
    let mut shown: String = text.chars().take(100).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// What the token needs for each topic asked for (Nomad's `validateNsOp`).
fn needs(subscription: &Subscription) -> Vec<Need> {
    subscription
        .topics
        .keys()
        .map(|topic| match topic.as_str() {
            "Allocation" | "Job" | "Evaluation" | "Service" | "Deployment" | "CSIPlugin" => {
                Need::Capability("read-job")
            }
            "Node" => Need::NodeRead,
            _ => Need::Management,
        })
        .collect()
}

fn allowed(
    shared: &Shared,
    token: Option<&str>,
    subscription: &Subscription,
) -> Result<(), ApiError> {
    let authority = authority(shared, token)?;
    needs(subscription)
        .into_iter()
        .try_for_each(|need| check(&authority, need))
}

impl Subscription {
    /// Nomad's filter: the namespace (a node's events have none), then the topic's keys.
    fn wants(&self, event: &Event) -> bool {
        if !event.namespace.is_empty() && self.namespace != "*" && event.namespace != self.namespace
        {
            return false;
        }
        let keys = self
            .topics
            .get("*")
            .into_iter()
            .chain(self.topics.get(event.topic.name()))
            .flatten();
        keys.into_iter().any(|key| {
            key == "*" || *key == event.key || event.filter_keys.iter().any(|k| k == key)
        })
    }
}

/// An event as Nomad's stream shows it.
fn event_json(
    shared: &Shared,
    node_names: &BTreeMap<quiesce_core::server::structs::NodeId, String>,
    node: &str,
    index: u64,
    event: &Event,
) -> Value {
    let payload = match event.snapshot.as_ref() {
        Snapshot::Alloc(alloc) => {
            let name = node_names.get(&alloc.node_id).map_or("", String::as_str);
            let mut value = alloc_json(alloc, name, &shared.config.bind.ip().to_string());
            // As Nomad's: the allocation without its job.
            value["Job"] = Value::Null;
            json!({ "Allocation": value })
        }
        // Nomad's payload is the job alone (a purge's event type says it was deleted).
        Snapshot::Job { job, status, .. } => json!({ "Job": job_json_with(job, status) }),
        Snapshot::Eval(eval) => json!({ "Evaluation": eval_json(eval) }),
        Snapshot::Service { service, owner, .. } => {
            let owner = owner
                .as_ref()
                .map(|o| (o.job.as_ref(), o.task_group.as_str(), o.ports.as_slice()));
            json!({ "Service": service_json(shared, node, service, owner) })
        }
        Snapshot::Deployment(deployment) => json!({ "Deployment": deployment.as_ref() }),
        Snapshot::Node(node) => {
            let mut value = node_json(node);
            value["SecretID"] = json!("");
            json!({ "Node": value })
        }
    };
    let filter_keys = if event.filter_keys.is_empty() {
        Value::Null
    } else {
        json!(event.filter_keys)
    };
    json!({
        "Topic": event.topic.name(), "Type": event.event_type, "Key": event.key,
        "Namespace": event.namespace, "FilterKeys": filter_keys, "Index": index,
        "Payload": payload,
    })
}

/// The batches' events `subscription` wants (batches with none left out), each with its
/// record as its write left it; the last batch's index; and whether the look took as many
/// batches as one may (so that more may be waiting).
#[allow(clippy::type_complexity)]
fn wanted(
    subscription: &Subscription,
    batches: Vec<Arc<quiesce_core::server::events::Batch>>,
) -> (Vec<(u64, Vec<Event>)>, Option<u64>, bool) {
    let full = batches.len() == BATCHES_A_LOOK;
    let last = batches.last().map(|b| b.index);
    let mut out = Vec::new();
    for batch in batches {
        let events: Vec<Event> = batch
            .events
            .iter()
            .filter(|e| subscription.wants(e))
            .cloned()
            .collect();
        if !events.is_empty() {
            out.push((batch.index, events));
        }
    }
    (out, last, full)
}

/// Subscribes: the first answer is the stream's (an error there is the answer), then a
/// task sends what each write the subscriber asked for published.
pub(super) async fn stream(
    shared: Arc<Shared>,
    request: ApiRequest,
) -> Result<tokio::sync::mpsc::Receiver<bytes::Bytes>, ApiError> {
    let slot = Slot::take(&STREAMS, MAX_STREAMS).ok_or_else(|| {
        error(
            429,
            format!("at most {MAX_STREAMS} event streams run at once"),
        )
    })?;
    let (_, query) = split_url(&request.url);
    let subscription = parse(&Query::parse(&query)?)?;
    let token = request.token.clone();
    allowed(&shared, token.as_deref(), &subscription)?;
    let mut cursor = {
        let mut core = shared.core();
        let start = match core.server.store.events() {
            Some(journal) => journal.start(subscription.index),
            None => return Err(error(500, "this agent keeps no event journal")),
        };
        start
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let _slot = slot;
        let line = |value: &Value| {
            let mut bytes = serde_json::to_vec(value).expect("JSON values serialize");
            bytes.push(b'\n');
            bytes::Bytes::from(bytes)
        };
        let heartbeat = || bytes::Bytes::from_static(b"{}\n");
        if tx.send(heartbeat()).await.is_err() {
            return;
        }
        // The heartbeat is due this long after the last line sent, however many writes woke
        // the stream in between (with nothing in them for this subscriber).
        let mut last_sent = tokio::time::Instant::now();
        loop {
            // Subscribed before looking, so a write in between is not missed.
            let mut changes = shared.changes();
            if shared.stopping.load(Ordering::SeqCst) {
                return;
            }
            if allowed(&shared, token.as_deref(), &subscription).is_err() {
                return; // the token is gone, or its rights
            }
            // Under the lock: the batches after the cursor (shared, each event with its
            // record as its write left it). Filtered and rendered after.
            let (looked, node_names, node) = {
                let mut core = shared.core();
                let node = core.node().to_string();
                let names = core
                    .server
                    .store
                    .nodes()
                    .map(|n| (n.id.clone(), n.name.clone()))
                    .collect::<BTreeMap<_, _>>();
                let since = core
                    .server
                    .store
                    .events()
                    .map(|journal| journal.since(cursor, BATCHES_A_LOOK));
                (since, names, node)
            };
            let looked = match looked {
                Some(Since::Batches(batches)) => Some(wanted(&subscription, batches)),
                // Fell behind what the journal keeps: ended, never skipped ahead.
                Some(Since::FellBehind { .. }) | None => None,
            };
            let Some((batches, last, full)) = looked else {
                return;
            };
            if let Some(last) = last {
                cursor = last + 1;
            }
            for (index, events) in batches {
                let events: Vec<Value> = events
                    .iter()
                    .map(|e| event_json(&shared, &node_names, &node, index, e))
                    .collect();
                let value = json!({"Index": index, "Events": events});
                if tx.send(line(&value)).await.is_err() {
                    return; // the client has gone
                }
                last_sent = tokio::time::Instant::now();
            }
            if full {
                continue;
            }
            // The next write, the client gone, or the heartbeat's time, whichever first.
            let mut changed = std::pin::pin!(changes.changed());
            let mut closed = std::pin::pin!(tx.closed());
            let woken = std::future::poll_fn(|cx| {
                use std::future::Future;
                if let std::task::Poll::Ready(result) = changed.as_mut().poll(cx) {
                    return std::task::Poll::Ready(result.is_ok());
                }
                closed.as_mut().poll(cx).map(|()| false)
            });
            match tokio::time::timeout_at(last_sent + HEARTBEAT, woken).await {
                Ok(true) => {}
                Ok(false) => return, // the client has gone, or the agent is stopping
                Err(_) => {
                    if tx.send(heartbeat()).await.is_err() {
                        return;
                    }
                    last_sent = tokio::time::Instant::now();
                }
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiesce_core::server::events::Topic;

    fn subscribe(query: &str) -> Result<Subscription, ApiError> {
        parse(&Query::parse(query).expect("parses"))
    }

    fn event(topic: Topic, key: &str, filter_keys: &[&str], namespace: &str) -> Event {
        let node = quiesce_core::server::structs::Node {
            id: key.into(),
            ..Default::default()
        };
        Event {
            topic,
            event_type: "",
            key: key.into(),
            filter_keys: filter_keys.iter().map(|k| k.to_string()).collect(),
            namespace: namespace.into(),
            snapshot: std::sync::Arc::new(Snapshot::Node(Box::new(node))),
        }
    }

    #[test]
    fn a_subscription_is_parsed_as_nomad_parses_it_and_bad_ones_are_named() {
        let all = subscribe("").unwrap();
        assert_eq!(all.index, 0);
        assert_eq!(all.namespace, "default");
        assert_eq!(all.topics, BTreeMap::from([("*".into(), vec!["*".into()])]));
        let some = subscribe("index=12&topic=Allocation:web&topic=Job&namespace=*").unwrap();
        assert_eq!(some.index, 12);
        assert_eq!(some.namespace, "*");
        assert_eq!(
            some.topics,
            BTreeMap::from([
                ("Allocation".into(), vec!["web".into()]),
                ("Job".into(), vec!["*".into()]),
            ])
        );
        // Nomad's own test sends `Evaluation:::*` and wants this text.
        let bad = subscribe("topic=Evaluation:::*").unwrap_err();
        assert_eq!(bad.status, 400);
        assert!(
            bad.message.contains("Invalid key value pair"),
            "{}",
            bad.message
        );
        for (query, named) in [
            ("topic=Allocations", "unknown topic \"Allocations\""),
            ("topic=Job:", "empty key"),
            ("index=-1", "Unable to parse index"),
            ("index=x", "\"x\""),
        ] {
            let e = subscribe(query).unwrap_err();
            assert_eq!(e.status, 400, "{query}");
            assert!(e.message.contains(named), "{query}: {}", e.message);
        }
        let many: Vec<String> = (0..=MAX_TOPICS).map(|i| format!("topic=Job:{i}")).collect();
        let e = subscribe(&many.join("&")).unwrap_err();
        assert!(e.message.contains("at most 64 topics"), "{}", e.message);
    }

    #[test]
    fn an_event_reaches_the_subscribers_of_its_topic_key_filter_keys_and_namespace() {
        let alloc = event(Topic::Allocation, "a1", &["web", ""], "default");
        let node = event(Topic::Node, "n1", &[], "");
        let wants = |query: &str, e: &Event| subscribe(query).unwrap().wants(e);
        assert!(wants("", &alloc));
        assert!(wants("topic=Allocation", &alloc));
        assert!(wants("topic=Allocation:a1", &alloc));
        assert!(wants("topic=Allocation:web", &alloc), "a filter key");
        assert!(wants("topic=Allocation:other&topic=Allocation:web", &alloc));
        assert!(wants("topic=*:web", &alloc));
        assert!(!wants("topic=Allocation:other", &alloc));
        assert!(!wants("topic=Job", &alloc));
        assert!(!wants("topic=Allocation&namespace=prod", &alloc));
        assert!(wants("topic=Allocation&namespace=*", &alloc));
        // A node has no namespace: every namespace's subscriber gets it.
        assert!(wants("topic=Node&namespace=prod", &node));
        assert!(!wants("topic=Allocation", &node));
    }

    #[test]
    fn a_topic_needs_what_nomad_asks_of_the_token() {
        let needs_of = |query: &str| {
            needs(&subscribe(query).unwrap())
                .into_iter()
                .map(|n| match n {
                    Need::Capability(c) => c.to_string(),
                    Need::NodeRead => "node:read".into(),
                    Need::Management => "management".into(),
                    _ => "other".into(),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            needs_of("topic=Allocation&topic=Service"),
            ["read-job", "read-job"]
        );
        assert_eq!(needs_of("topic=Node"), ["node:read"]);
        assert_eq!(needs_of(""), ["management"]);
        assert_eq!(needs_of("topic=ACLToken"), ["management"]);
    }
}
