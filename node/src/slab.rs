//! What a lock handle holds for JavaScript, by number: each guard is a number into its lock's
//! [`Slab`], and the slot keeps the guard's acquisition record (or the RwLock guard), so that a
//! release ends exactly that acquisition, without encoding or hashing the key again.
//!
//! A number names one slot in one generation: a slot freed and reused gets a new number, so a
//! number kept after its release (a bug in the caller) finds nothing rather than someone else's
//! acquisition. Numbers fit in 31 bits, so JavaScript gets them as small integers.

/// Bits of a slot number that say where the slot is (index + 1); the rest are its generation.
const INDEX_BITS: u32 = 22;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// Generations wrap within the 31 bits of a small integer.
const GEN_MASK: u32 = (1 << (31 - INDEX_BITS)) - 1;

/// The most slots one slab holds at once (numbers 0 and the mask are never used).
pub(crate) const CAPACITY: usize = (INDEX_MASK - 1) as usize;

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Values by number (see the module docs).
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    fn number(index: u32, generation: u32) -> u32 {
        ((generation & GEN_MASK) << INDEX_BITS) | (index + 1)
    }

    fn index(number: u32) -> Option<usize> {
        let i = number & INDEX_MASK;
        (i != 0).then(|| i as usize - 1)
    }

    /// Stores `value`; its number (never 0), or `Err(value)` when the slab is full.
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Result<u32, T> {
        match self.vacant() {
            Some(index) => Ok(self.fill(index, value)),
            None => Err(value),
        }
    }

    /// An empty slot's index, for [`fill`](Self::fill) (which must follow, before anything
    /// else is done to the slab); `None` when the slab is full. Apart from `insert` so that a
    /// caller that has to give the value back when the slab is full (`Keyed::store`) moves it
    /// once, into its slot: through `insert`, the compiler kept a copy of it for the `Err`.
    #[inline]
    pub(crate) fn vacant(&mut self) -> Option<u32> {
        match self.free.pop() {
            Some(i) => Some(i),
            None if self.slots.len() < CAPACITY => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                Some(self.slots.len() as u32 - 1)
            }
            None => None,
        }
    }

    /// Stores `value` in the empty slot `index` (from [`vacant`](Self::vacant)): its number.
    #[inline]
    pub(crate) fn fill(&mut self, index: u32, value: T) -> u32 {
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_none(), "a vacant slot is empty");
        slot.value = Some(value);
        self.len += 1;
        Self::number(index, slot.generation)
    }

    /// The index of the slot `number` names, if its generation is the slot's current one.
    #[inline]
    fn live(&self, number: u32) -> Option<usize> {
        let index = Self::index(number)?;
        let slot = self.slots.get(index)?;
        (slot.generation == (number >> INDEX_BITS)).then_some(index)
    }

    /// The value numbered `number`, if it is still there.
    #[inline]
    pub(crate) fn get(&self, number: u32) -> Option<&T> {
        self.slots[self.live(number)?].value.as_ref()
    }

    /// The value numbered `number`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, number: u32) -> Option<&mut T> {
        let index = self.live(number)?;
        self.slots[index].value.as_mut()
    }

    /// Takes the value numbered `number` out; its number is never valid again.
    #[inline]
    pub(crate) fn take(&mut self, number: u32) -> Option<T> {
        let index = self.live(number)?;
        let value = self.slots[index].value.take()?;
        self.vacate(index);
        Some(value)
    }

    /// Drops the value numbered `number` where it lies (as `take` does, without moving it out);
    /// whether there was one.
    #[inline]
    pub(crate) fn remove(&mut self, number: u32) -> bool {
        let Some(index) = self.live(number) else {
            return false;
        };
        let slot = &mut self.slots[index];
        if slot.value.is_none() {
            return false;
        }
        slot.value = None;
        self.vacate(index);
        true
    }

    /// Frees slot `index`, whose value was just taken out: its number is never valid again.
    #[inline]
    fn vacate(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        slot.generation = (slot.generation + 1) & GEN_MASK;
        self.free.push(index as u32);
        self.len -= 1;
    }

    /// How many values are stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes every value out.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let out: Vec<T> = self
            .slots
            .iter_mut()
            .filter_map(|s| s.value.take())
            .collect();
        self.slots.clear();
        self.free.clear();
        self.len = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_never_reused_for_a_new_value() {
        let mut slab = Slab::default();
        let a = slab.insert("a").unwrap();
        assert_ne!(a, 0);
        assert_eq!(slab.get(a), Some(&"a"));
        assert_eq!(slab.take(a), Some("a"));
        assert_eq!(slab.take(a), None, "taken twice");
        let b = slab.insert("b").unwrap();
        assert_ne!(a, b, "the same slot, a new number");
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.take(a), None, "a stale number takes nothing");
        assert_eq!(slab.get(b), Some(&"b"));
        assert!(b < 1 << 31);
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.get(0), None);
        assert_eq!(slab.get(u32::MAX), None);
        assert_eq!(slab.drain(), vec!["b"]);
        assert_eq!(slab.len(), 0);
    }

    #[test]
    fn generations_wrap_within_31_bits() {
        let mut slab = Slab::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 * (GEN_MASK as usize + 1) {
            let n = slab.insert(()).unwrap();
            assert!(n < 1 << 31 && n != 0);
            seen.insert(n);
            slab.take(n);
        }
        assert_eq!(seen.len(), GEN_MASK as usize + 1);
    }
}
