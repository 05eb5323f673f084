//! Comparing two versions' specs without cloning them.

use super::Job;

impl Job {
    /// `self.spec_only() == other.spec_only()` without cloning either: the lockstep walk
    /// compares every stored version with the one before it after every step. The pattern
    /// names every field, so a new one must be sorted into spec or bookkeeping here too.
    pub fn same_spec(&self, other: &Job) -> bool {
        let Job {
            id,
            name,
            job_type,
            priority,
            namespace,
            region,
            datacenters,
            node_pool,
            task_groups,
            meta,
            constraints,
            update,
            stop: _,
            version: _,
            create_index: _,
            modify_index: _,
            job_modify_index: _,
            submit_time: _,
            stable: _,
            submission: _,
        } = self;
        *id == other.id
            && *name == other.name
            && *job_type == other.job_type
            && *priority == other.priority
            && *namespace == other.namespace
            && *region == other.region
            && *datacenters == other.datacenters
            && *node_pool == other.node_pool
            && *task_groups == other.task_groups
            && *meta == other.meta
            && *constraints == other.constraints
            && *update == other.update
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{Job, Submission, TaskGroup};
    use std::sync::Arc;

    #[test]
    fn same_spec_agrees_with_comparing_spec_only() {
        let base = Job {
            id: "web".into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        let bookkeeping = Job {
            stop: true,
            version: 3,
            create_index: 4,
            modify_index: 5,
            job_modify_index: 6,
            submit_time: 7,
            stable: true,
            submission: Some(Arc::new(Submission::default())),
            ..base.clone()
        };
        let mut edited = base.clone();
        edited.task_groups[0].shutdown_delay_ns = Some(1);
        let renamed = Job {
            name: "other".into(),
            ..base.clone()
        };
        for (a, b) in [
            (&base, &bookkeeping),
            (&base, &edited),
            (&bookkeeping, &edited),
            (&base, &renamed),
            (&edited, &edited),
        ] {
            assert_eq!(a.same_spec(b), a.spec_only() == b.spec_only());
            assert_eq!(b.same_spec(a), a.spec_only() == b.spec_only());
        }
        assert!(base.same_spec(&bookkeeping));
        assert!(!base.same_spec(&edited));
    }
}
