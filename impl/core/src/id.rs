//! [`Id`]: the text of an identifier (an allocation's, a node's or a job's, and an
//! allocation's task group name; evaluations' and deployments' are still `String`s), shared
//! rather than copied.
//!
//! A record is copied whenever it is written and a copy of the simulator still holds it
//! (copy on write), and its identifiers are map keys everywhere: as `String`s each copy was
//! an allocation and each map lookup a call to `memcmp` per key passed. An `Id` is a shared
//! pointer to its text beside the text's first eight bytes as a number: a copy is a count's
//! increment, and two IDs that differ in those bytes (generated ones do; `node-0` and
//! `node-1` do) compare without reading their text. It orders, hashes and compares as its
//! text does, so a map keyed by `Id` is looked up by `&str` as well (then at a `str`'s
//! cost), and it is written and read in JSON as a plain string.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

#[derive(Clone)]
pub struct Id {
    /// The text's first eight bytes as a number that orders as they do ([`prefix`]): most
    /// comparisons end here without reading the text.
    prefix: u64,
    text: Arc<str>,
}

impl Id {
    fn new(text: Arc<str>) -> Id {
        Id {
            prefix: prefix(&text),
            text,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Default for Id {
    fn default() -> Id {
        Id::new(Arc::from(""))
    }
}

impl Deref for Id {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl Borrow<str> for Id {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.prefix == other.prefix
            && (Arc::ptr_eq(&self.text, &other.text) || self.text == other.text)
    }
}

impl Eq for Id {}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Id) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Id {
    /// The order of the text (as `Borrow<str>` requires): from their first eight bytes when
    /// those differ (a generated ID's do), without reading the text; without comparing it
    /// when both are one.
    fn cmp(&self, other: &Id) -> Ordering {
        match self.prefix.cmp(&other.prefix) {
            Ordering::Equal if Arc::ptr_eq(&self.text, &other.text) => Ordering::Equal,
            Ordering::Equal => self.text.cmp(&other.text),
            order => order,
        }
    }
}

/// The first eight bytes of `text` (fewer, padded with zeros, when it is shorter) as one
/// number that orders as they do. Where two prefixes differ, the first byte that differs is
/// either in both texts, or past the end of the one with a zero there and not zero in the
/// other, which is then the longer: both orders agree with the text's.
fn prefix(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let mut word = [0u8; 8];
    let len = bytes.len().min(8);
    word[..len].copy_from_slice(&bytes[..len]);
    u64::from_be_bytes(word)
}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl From<String> for Id {
    fn from(text: String) -> Id {
        Id::new(Arc::from(text))
    }
}

impl From<&str> for Id {
    fn from(text: &str) -> Id {
        Id::new(Arc::from(text))
    }
}

impl From<Id> for String {
    fn from(id: Id) -> String {
        id.as_str().to_string()
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Id {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Id> for str {
    fn eq(&self, other: &Id) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Id> for &str {
    fn eq(&self, other: &Id) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Id> for String {
    fn eq(&self, other: &Id) -> bool {
        self == other.as_str()
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        String::deserialize(deserializer).map(Id::from)
    }
}

#[cfg(test)]
mod tests {
    use super::Id;
    use std::collections::BTreeMap;

    #[test]
    fn an_id_orders_compares_and_is_written_as_its_text() {
        let (a, b) = (Id::from("alpha"), Id::from("beta"));
        assert!(a < b);
        assert_eq!(b.cmp(&a), std::cmp::Ordering::Greater);
        assert_eq!(a, Id::from("alpha".to_string()));
        assert_eq!(a, "alpha");
        assert_eq!("alpha", a);
        assert_eq!(a.clone().cmp(&a), std::cmp::Ordering::Equal);
        let map: BTreeMap<Id, u8> = [(b.clone(), 2), (a.clone(), 1)].into();
        assert_eq!(map.get("beta"), Some(&2));
        assert_eq!(map.keys().next(), Some(&a));
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"alpha\"");
        assert_eq!(serde_json::from_str::<Id>("\"beta\"").unwrap(), b);
        assert_eq!(format!("{a} {a:?}"), "alpha \"alpha\"");
        assert_eq!(String::from(b), "beta");
    }

    /// Ids order as their texts do, whether they differ in their first eight bytes or
    /// after them, or one is the other's beginning (with a zero byte or not).
    #[test]
    fn ids_order_as_their_texts() {
        let texts = [
            "",
            "a",
            "a\0",
            "a\0b",
            "ab",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefgi",
            "abcdefg",
            "b",
            "\u{e9}",
            "node-10",
            "node-9",
            "0d3f9a2e-5b1c-4e8f-9a7b-1c2d3e4f5a6b",
            "0d3f9a2e-5b1c-4e8f-9a7b-1c2d3e4f5a6c",
        ];
        for a in texts {
            for b in texts {
                let (x, y) = (Id::from(a), Id::from(b));
                assert_eq!(x.cmp(&y), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(x == y, a == b, "{a:?} against {b:?}");
            }
        }
    }
}
