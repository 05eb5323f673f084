//! The evaluation broker: pending evaluations, at most one per job. A newer evaluation of a
//! job supersedes the pending one (Nomad's broker cancels them), so "an evaluation is
//! pending" is one bit per job, as the model has it.

use super::structs::{EvalId, JobId};
use std::collections::{BTreeMap, VecDeque};

#[derive(Clone, Debug, Default)]
pub struct EvalBroker {
    pending: BTreeMap<JobId, EvalId>,
    /// Jobs in the order their pending evaluation arrived (first in, first out).
    order: VecDeque<JobId>,
}

impl EvalBroker {
    /// Enqueues `eval` for `job`; returns the pending evaluation it supersedes, if any.
    pub fn enqueue(&mut self, job: &str, eval: &str) -> Option<EvalId> {
        let superseded = self.pending.insert(JobId::from(job), eval.to_string());
        if superseded.is_none() {
            self.order.push_back(JobId::from(job));
        }
        superseded
    }

    pub fn dequeue(&mut self) -> Option<EvalId> {
        let job = self.order.pop_front()?;
        self.pending.remove(&job)
    }

    /// The job whose evaluation is next.
    pub fn next_job(&self) -> Option<&JobId> {
        self.order.front()
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::EvalBroker;

    #[test]
    fn a_newer_evaluation_supersedes_the_pending_one_of_its_job() {
        let mut broker = EvalBroker::default();
        assert_eq!(broker.enqueue("web", "e1"), None);
        assert_eq!(broker.enqueue("api", "e2"), None);
        assert_eq!(broker.enqueue("web", "e3"), Some("e1".to_string()));
        assert_eq!(broker.dequeue().as_deref(), Some("e3"));
        assert_eq!(broker.dequeue().as_deref(), Some("e2"));
        assert_eq!(broker.dequeue(), None);
        assert!(!broker.has_pending());
    }
}
