//! Identifiers: UUID-shaped strings from a seeded generator, so that a simulator run is
//! reproducible and IDs look like Nomad's.

#[derive(Clone, Debug)]
pub struct IdGen {
    state: u64,
}

impl IdGen {
    pub fn new(seed: u64) -> Self {
        IdGen { state: seed }
    }

    /// splitmix64: a well-mixed sequence from any seed.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A version-4-shaped UUID: `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`.
    pub fn uuid(&mut self) -> String {
        let (high, low) = (self.next_u64(), self.next_u64());
        let high = (high & !0xF000) | 0x4000;
        let low = (low & !(0xC << 60)) | (0x8 << 60);
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xFFFF,
            high & 0xFFFF,
            low >> 48,
            low & 0xFFFF_FFFF_FFFF
        )
    }
}

#[cfg(test)]
mod tests {
    use super::IdGen;

    #[test]
    fn uuids_are_well_formed_distinct_and_reproducible() {
        let mut ids = IdGen::new(7);
        let first = ids.uuid();
        assert_eq!(first.len(), 36);
        assert_eq!(first.as_bytes()[14], b'4');
        assert!(
            matches!(first.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "{first}"
        );
        assert_ne!(first, ids.uuid());
        assert_eq!(IdGen::new(7).uuid(), first);
    }
}
