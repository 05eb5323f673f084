//! Scaling events as the store keeps them: at most 20 per group, newest first, one per
//! accepted request, none for a refused one, gone with a purged job, kept by a restore.

use super::*;
use crate::server::store::{StateStore, Tables};
use crate::server::StopJobOptions;
use crate::spec::{Task, TaskGroup};

/// A batch job (no deployment holds a count back) with groups `web` (count 1) and `api`.
fn job() -> Job {
    let group = |name: &str| TaskGroup {
        name: name.into(),
        count: Some(1),
        tasks: vec![Task {
            name: "app".into(),
            driver: "mock_driver".into(),
            ..Task::default()
        }],
        ..TaskGroup::default()
    };
    Job {
        id: "web".into(),
        job_type: "batch".into(),
        task_groups: vec![group("web"), group("api")],
        ..Job::default()
    }
}

fn server() -> Server {
    let mut server = Server::new(Vec::new(), 3);
    server.register_job(job()).unwrap();
    server
}

fn note(group: &str, message: &str) -> ScaleRequest {
    ScaleRequest {
        group: group.into(),
        message: message.into(),
        ..ScaleRequest::default()
    }
}

fn events<'a>(server: &'a Server, group: &str) -> &'a [ScalingEvent] {
    server
        .store
        .scaling_events("web")
        .and_then(|job| job.scaling_events.get(group))
        .map_or(&[], Vec::as_slice)
}

#[test]
fn each_group_keeps_its_twenty_newest_events_newest_first() {
    let mut server = server();
    for n in 0..25 {
        let request = if n % 5 == 0 {
            ScaleRequest {
                count: Some(n % 3),
                ..note("web", &format!("web {n}"))
            }
        } else {
            note("web", &format!("web {n}"))
        };
        server.scale_job("web", request).unwrap();
    }
    for n in 0..3 {
        server
            .scale_job("web", note("api", &format!("api {n}")))
            .unwrap();
    }
    let web = events(&server, "web");
    assert_eq!(web.len(), JOB_TRACKED_SCALING_EVENTS);
    let messages: Vec<&str> = web.iter().map(|e| e.message.as_str()).collect();
    let expected: Vec<String> = (5..25).rev().map(|n| format!("web {n}")).collect();
    assert_eq!(messages, expected, "the newest first, the oldest five gone");
    assert!(
        web.windows(2)
            .all(|pair| pair[0].create_index > pair[1].create_index),
        "newest first by index"
    );
    let api: Vec<&str> = events(&server, "api")
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        api,
        ["api 2", "api 1", "api 0"],
        "a group's bound is its own"
    );
    // `web 20` set the count to 20 % 3 = 2 after `web 15` set it to 0.
    let twenty = web.iter().find(|e| e.message == "web 20").unwrap();
    assert_eq!((twenty.count, twenty.previous_count), (Some(2), 0));
    let index = server.store.scaling_events("web").unwrap().modify_index;
    assert_eq!(index, events(&server, "api")[0].create_index);
    assert_eq!(server.store.table_indexes().scaling_events, index);
}

#[test]
fn a_count_registers_a_version_and_its_event_names_the_evaluation() {
    let mut server = server();
    let request = ScaleRequest {
        count: Some(3),
        meta: Some(Map::from_iter([(
            "reason".to_string(),
            Value::from("load"),
        )])),
        ..note("web", "more")
    };
    let response = server.scale_job("web", request).unwrap();
    let stored = server.store.job("web").unwrap();
    assert_eq!((stored.version, stored.task_groups[0].count), (1, Some(3)));
    assert_eq!(response.job_modify_index, stored.job_modify_index);
    assert_eq!(response.eval_create_index, stored.job_modify_index);
    assert!(response.index > response.eval_create_index, "its own write");
    let [event] = events(&server, "web") else {
        panic!("one event");
    };
    assert_eq!(event.eval_id.as_deref(), Some(response.eval_id.as_str()));
    assert!(!response.eval_id.is_empty());
    assert_eq!((event.count, event.previous_count), (Some(3), 1));
    assert_eq!(event.create_index, response.index);
    assert_eq!(event.meta.as_ref().unwrap()["reason"], "load");
    assert!(!event.error);
}

#[test]
fn a_request_without_a_count_records_an_event_and_changes_no_job() {
    let mut server = server();
    let before = server.store.job("web").unwrap().clone();
    let error = ScaleRequest {
        error: true,
        ..note("web", "the autoscaler failed")
    };
    let response = server.scale_job("web", error).unwrap();
    assert_eq!(server.store.job("web"), Some(&before));
    assert_eq!(server.store.job_versions("web").unwrap().len(), 1);
    assert_eq!(
        (response.eval_id.as_str(), response.eval_create_index),
        ("", 0)
    );
    assert_eq!(response.job_modify_index, before.modify_index);
    let [event] = events(&server, "web") else {
        panic!("one event");
    };
    assert!(event.error && event.count.is_none() && event.eval_id.is_none());
    assert_eq!(event.previous_count, 1);
}

#[test]
fn a_refused_request_records_nothing_and_names_what_was_wrong() {
    let mut server = server();
    server.scale_job("web", note("web", "kept")).unwrap();
    let refused = |server: &mut Server, id: &str, request: ScaleRequest| {
        let error = server.scale_job(id, request).unwrap_err();
        assert_eq!(events(server, "web").len(), 1, "{error}: nothing recorded");
        error.to_string()
    };
    let long = "x".repeat(MAX_SCALING_MESSAGE_BYTES + 1);
    assert!(refused(&mut server, "web", note("web", &long)).starts_with("Message is 4097 bytes"));
    let meta = Map::from_iter([("k".to_string(), Value::from(long.repeat(4)))]);
    let heavy = ScaleRequest {
        meta: Some(meta),
        ..note("web", "")
    };
    assert!(refused(&mut server, "web", heavy).starts_with("Meta is "));
    let both = ScaleRequest {
        count: Some(1),
        error: true,
        ..note("web", "")
    };
    assert_eq!(
        refused(&mut server, "web", both),
        "scaling action should not contain count if error is true"
    );
    let negative = ScaleRequest {
        count: Some(-1),
        ..note("web", "")
    };
    assert_eq!(
        refused(&mut server, "web", negative),
        "scaling action count can't be negative"
    );
    assert_eq!(
        refused(&mut server, "web", note("", "")),
        "missing task group name for scaling action"
    );
    assert_eq!(
        refused(&mut server, "web", note("db", "")),
        "task group \"db\" specified for scaling does not exist in job"
    );
    assert_eq!(
        refused(&mut server, "nope", note("web", "")),
        "job \"nope\" not found"
    );
    let stale = ScaleRequest {
        count: Some(2),
        job_modify_index: 999,
        ..note("web", "")
    };
    assert!(refused(&mut server, "web", stale).contains("conflicting job modify index"));
}

#[test]
fn a_purge_deletes_the_events_and_a_restore_keeps_them() {
    let mut server = server();
    server.scale_job("web", note("web", "kept")).unwrap();
    let store = &server.store;
    let tables = Tables {
        jobs: [("web".into(), store.job_versions("web").unwrap().to_vec())].into(),
        scaling_events: vec![store.scaling_events("web").unwrap().clone()],
        ..Tables::default()
    };
    let restored = StateStore::restore(store.index(), tables, store.table_indexes());
    assert_eq!(restored.scaling_events("web"), store.scaling_events("web"));
    let purge = StopJobOptions {
        purge: true,
        ..StopJobOptions::default()
    };
    server.stop_job("web", purge).unwrap();
    assert!(server.store.scaling_events("web").is_none(), "purged");
    server.register_job(job()).unwrap();
    assert!(events(&server, "web").is_empty(), "a new job has none");
}
