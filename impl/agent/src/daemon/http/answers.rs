//! What the agent holds of its answers, agent-wide: bounded, and shared where it can be.
//!
//! Issue 24, finding 3: 300 sockets that asked for `/v1/allocations` (1,000 allocations,
//! 0.9 MB) and never read took the agent from 40 MB to 1.56 GB — an answer built and
//! encoded per request, each held until its client took it or the write timeout (30 s)
//! closed the connection, and up to 32 handler threads building copies at once. Now:
//!
//! * **One encoded copy per answer and state.** A read of the store is keyed by its URL,
//!   its token, the index of what it reads and the index of the last ACL write (a key
//!   names one answer: see [`Key`]); while any client still holds a copy of that answer, a
//!   request with the same key gets the same bytes, without building it again.
//! * **One gzip copy beside it**, made by the first request that takes gzip (`gzip.rs`) and
//!   shared by the later ones; either copy keeps both, and both count against the budget.
//! * **At most [`MAX_BUILDERS`] answers built at once.** A request waits for its turn and
//!   then looks again, so a crowd asking for the same list builds it once.
//! * **A budget of unsent bytes.** Every whole answer counts, from its encoding until the
//!   last copy of its bytes is dropped (sent, or its connection closed), against
//!   [`MAX_UNSENT_BYTES`] agent-wide; past it, a read that would need a new answer gets a
//!   503 with `Retry-After` instead (one already encoded is still served: it costs nothing).
//!
//! Two settings keep the budget honest: a connection's kernel send buffer is 128 KiB, so
//! the rest of an unread answer stays where the budget sees it; and glibc keeps at most two
//! malloc arenas (`M_ARENA_MAX`, set by `quiesce agent`), each of which holds on to the
//! most it ever had. `/v1/metrics` gauges the bytes held
//! (`quiesce.http.unsent_answer_bytes`). A file read under `/v1/client/fs/` is built in the
//! same turns and counted against the same budget. Measured
//! (`proofs/e2e/test_resource_bounds.py`, 1,000 allocations, 0.98 MB answers, 300 sockets
//! with a 4 KB receive buffer that never read): the same URL +52 MB, 300 different URLs
//! +99 MB with 78 held and 222 refused; 300 non-readers of a 1 MiB log +110–116 MB.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// The most bytes of encoded answers held agent-wide before new ones are refused.
pub const MAX_UNSENT_BYTES: usize = 64 << 20;
/// The most answers built at once (each holds the store's records as JSON values while it
/// is built).
pub const MAX_BUILDERS: usize = 4;
/// Entries of the cache looked at for a sweep of dead ones, once it holds this many.
const SWEEP_AT: usize = 4096;

/// Which answer: the URL as sent, the token it was asked with, the index of what the
/// answer reads, and the index of the last ACL write.
///
/// `index` must move with every write that can change the answer: the store's index (every
/// write moves it) for any read, or, for a list, the latest index of the tables it reads
/// (each write moves its table's: `StateStore::table_indexes`), so that a write elsewhere
/// leaves the list's answer shared. `acl_index` moves with every ACL write: a token's
/// rights are checked when the answer is built, not when it is served again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub url: String,
    pub token: Option<String>,
    pub index: u64,
    pub acl_index: u64,
}

/// An answer's bytes, its gzip copy once made, and their share of the budget, given back
/// when the last copy of either goes.
struct Encoded {
    bytes: Vec<u8>,
    /// Made once, by the first request that takes gzip; `None` if it was no smaller.
    gzip: OnceLock<Option<Vec<u8>>>,
    unsent: Arc<AtomicUsize>,
}

impl Encoded {
    fn gzip_len(&self) -> usize {
        self.gzip.get().and_then(Option::as_ref).map_or(0, Vec::len)
    }
}

impl Drop for Encoded {
    fn drop(&mut self) {
        let held = self.bytes.len() + self.gzip_len();
        self.unsent.fetch_sub(held, Ordering::Relaxed);
    }
}

/// The owner of a [`Bytes`] copy: the answer, shared.
struct Copy(Arc<Encoded>);

impl AsRef<[u8]> for Copy {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// The owner of a [`Bytes`] copy of the gzip bytes (made before one is handed out).
struct GzipCopy(Arc<Encoded>);

impl AsRef<[u8]> for GzipCopy {
    fn as_ref(&self) -> &[u8] {
        self.0
            .gzip
            .get()
            .and_then(Option::as_deref)
            .expect("a gzip copy is handed out once made")
    }
}

/// An answer in the cache: its plain bytes, and its gzip copy on demand.
pub struct Answer(Arc<Encoded>);

impl Answer {
    /// The answer's bytes, as encoded.
    pub fn plain(&self) -> Bytes {
        Bytes::from_owner(Copy(Arc::clone(&self.0)))
    }

    /// The answer gzip-compressed (`gzip.rs`): made by the first caller, while others of
    /// the same answer wait for it, and shared by every later one. `None` — send it plain —
    /// for an answer under [`super::gzip::MIN_BYTES`], one that does not compress, or one
    /// whose copy is not made yet while the budget of unsent bytes is spent.
    pub fn gzip(&self) -> Option<Bytes> {
        let encoded = &self.0;
        if encoded.bytes.len() < super::gzip::MIN_BYTES {
            return None;
        }
        if encoded.gzip.get().is_none()
            && encoded.unsent.load(Ordering::Relaxed) >= MAX_UNSENT_BYTES
        {
            return None;
        }
        let made = encoded.gzip.get_or_init(|| {
            let compressed = super::gzip::compress(&encoded.bytes);
            let held = compressed.as_ref().map_or(0, Vec::len);
            encoded.unsent.fetch_add(held, Ordering::Relaxed);
            compressed
        });
        made.as_ref()?;
        Some(Bytes::from_owner(GzipCopy(Arc::clone(encoded))))
    }
}

/// What is remembered of an encoded answer: its bytes while anyone holds them, and what
/// goes with them in the reply.
struct Entry {
    encoded: Weak<Encoded>,
    meta: Meta,
}

/// The reply's parts beside its body.
#[derive(Clone, Debug)]
pub struct Meta {
    pub status: u16,
    pub index: Option<u64>,
    pub next_token: Option<String>,
}

#[derive(Default)]
pub struct Answers {
    unsent: Arc<AtomicUsize>,
    cache: Mutex<HashMap<Key, Entry>>,
    builders: (Mutex<usize>, Condvar),
}

/// A turn to build an answer ([`Answers::turn`]), given back when dropped.
pub struct Turn<'a>(&'a Answers);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let (count, freed) = &self.0.builders;
        *count.lock().expect("the builders' count is never poisoned") -= 1;
        freed.notify_one();
    }
}

impl Answers {
    /// Bytes of encoded answers held now.
    pub fn unsent(&self) -> usize {
        self.unsent.load(Ordering::Relaxed)
    }

    /// Whether a new answer may be encoded now.
    pub fn has_room(&self) -> bool {
        self.unsent() < MAX_UNSENT_BYTES
    }

    /// Encodes `bytes` as a held answer: counted until its last copy is dropped.
    pub fn hold(&self, bytes: Vec<u8>) -> Bytes {
        self.unsent.fetch_add(bytes.len(), Ordering::Relaxed);
        Bytes::from_owner(Copy(Arc::new(Encoded {
            bytes,
            gzip: OnceLock::new(),
            unsent: Arc::clone(&self.unsent),
        })))
    }

    /// The answer for `key`, if a client still holds a copy of it.
    pub fn get(&self, key: &Key) -> Option<(Answer, Meta)> {
        let cache = self
            .cache
            .lock()
            .expect("the answers' cache is never poisoned");
        let entry = cache.get(key)?;
        let encoded = entry.encoded.upgrade()?;
        Some((Answer(encoded), entry.meta.clone()))
    }

    /// Encodes `bytes` as the answer for `key`, shared with later requests of that key while
    /// any copy is held.
    pub fn keep(&self, key: Key, bytes: Vec<u8>, meta: Meta) -> Answer {
        self.unsent.fetch_add(bytes.len(), Ordering::Relaxed);
        let encoded = Arc::new(Encoded {
            bytes,
            gzip: OnceLock::new(),
            unsent: Arc::clone(&self.unsent),
        });
        let mut cache = self
            .cache
            .lock()
            .expect("the answers' cache is never poisoned");
        if cache.len() >= SWEEP_AT {
            cache.retain(|_, entry| entry.encoded.strong_count() > 0);
        }
        cache.insert(
            key,
            Entry {
                encoded: Arc::downgrade(&encoded),
                meta,
            },
        );
        Answer(encoded)
    }

    /// Waits for a turn to build an answer: at most [`MAX_BUILDERS`] at once.
    pub fn turn(&self) -> Turn<'_> {
        let (count, freed) = &self.builders;
        let mut building = count.lock().expect("the builders' count is never poisoned");
        while *building >= MAX_BUILDERS {
            building = freed
                .wait(building)
                .expect("the builders' count is never poisoned");
        }
        *building += 1;
        Turn(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(index: u64) -> Key {
        Key {
            url: "/v1/allocations".into(),
            token: None,
            index,
            acl_index: 0,
        }
    }

    fn meta() -> Meta {
        Meta {
            status: 200,
            index: Some(1),
            next_token: None,
        }
    }

    #[test]
    fn an_answer_is_shared_while_held_and_counted_until_its_last_copy_goes() {
        let answers = Answers::default();
        let first = answers.keep(key(7), vec![b'x'; 1000], meta()).plain();
        assert_eq!(answers.unsent(), 1000);
        let second = answers.get(&key(7)).expect("held, so shared").0.plain();
        assert_eq!(
            second.as_ptr(),
            first.as_ptr(),
            "the same bytes, not a copy"
        );
        assert_eq!(answers.unsent(), 1000, "counted once");
        assert!(
            answers.get(&key(8)).is_none(),
            "another index is another answer"
        );
        drop(first);
        assert_eq!(answers.unsent(), 1000, "a copy is still held");
        let sliced = second.slice(10..20);
        drop(second);
        assert_eq!(answers.unsent(), 1000, "a part of it too");
        drop(sliced);
        assert_eq!(answers.unsent(), 0);
        assert!(answers.get(&key(7)).is_none(), "gone once nobody holds it");
        let held = answers.hold(vec![0; 10]);
        assert_eq!(answers.unsent(), 10);
        drop(held);
        assert_eq!(answers.unsent(), 0);
    }

    #[test]
    fn a_gzip_copy_is_made_once_shared_and_counted_with_its_answer() {
        let answers = Answers::default();
        let plain = br#"{"ID":"web","ClientStatus":"running"},"#.repeat(100);
        let kept = answers.keep(key(7), plain.clone(), meta());
        assert_eq!(answers.unsent(), plain.len());
        let first = kept.gzip().expect("a large answer that compresses");
        let compressed = first.len();
        assert!(compressed < plain.len() / 10, "{compressed} bytes");
        assert_eq!(answers.unsent(), plain.len() + compressed);
        drop(kept);
        let (again, _) = answers.get(&key(7)).expect("a gzip copy holds its answer");
        let second = again.gzip().expect("made already");
        assert_eq!(
            second.as_ptr(),
            first.as_ptr(),
            "the same bytes, not a copy"
        );
        assert_eq!(answers.unsent(), plain.len() + compressed, "counted once");
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&second[..]), &mut back)
            .unwrap();
        assert_eq!(back, plain);
        drop((again, first, second));
        assert_eq!(answers.unsent(), 0, "both given back with the last copy");
        let small = answers.keep(
            key(8),
            vec![b'x'; super::super::gzip::MIN_BYTES - 1],
            meta(),
        );
        assert!(small.gzip().is_none(), "a small answer goes plain");
    }

    #[test]
    fn at_most_max_builders_build_at_once() {
        let answers = Arc::new(Answers::default());
        let busy = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (answers, busy, most) = (answers.clone(), busy.clone(), most.clone());
                std::thread::spawn(move || {
                    let _turn = answers.turn();
                    let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    busy.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!((1..=MAX_BUILDERS).contains(&most), "{most} at once");
    }
}
