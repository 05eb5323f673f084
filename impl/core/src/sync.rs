//! The primitives shared between the daemon's threads, from std — or from loom under
//! the cfg `quiesce_loom` (the `loom` feature, build.rs), so that loom explores every interleaving of the production code
//! that uses them. Nothing else in the crate names `std::sync` for state loom must see.

#[cfg(not(quiesce_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(quiesce_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(all(test, not(quiesce_loom)))]
pub(crate) use std::thread;

#[cfg(all(test, quiesce_loom))]
pub(crate) use loom::thread;
