//! The model's `standard` job is the jobspec the implementation runs: the adapter maps
//! `tests/data/web.json` onto exactly the model's task group.

use quiesce_core::spec::parse_register_body;
use quiesce_proofs::adapter::group_cfg;

fn web_job() -> quiesce_core::spec::Job {
    let body = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/web.json")).unwrap();
    parse_register_body(&body).unwrap()
}

#[test]
fn the_standard_group_is_the_web_jobspec() {
    let job = web_job();
    // A real task may end on its own at any moment it runs: the model's crashing group.
    assert_eq!(
        group_cfg(&job, "web").unwrap(),
        quiesce_model::config::web_group_crashing()
    );
    assert_eq!(job.task_groups[0].count, Some(2));
}

#[test]
fn a_zero_delay_is_no_delay_in_the_model() {
    let mut job = web_job();
    job.task_groups[0].shutdown_delay_ns = Some(0);
    job.task_groups[0].tasks[0].shutdown_delay_ns = 0;
    let group = group_cfg(&job, "web").unwrap();
    assert!(!group.shutdown_delay && !group.tasks[0].shutdown_delay);
    assert!(group.tasks[1].shutdown_delay, "the sidecar keeps its delay");
}

#[test]
fn an_unknown_group_is_named_in_the_error() {
    assert_eq!(
        group_cfg(&web_job(), "api").unwrap_err(),
        "job \"web\" has no task group \"api\""
    );
}
