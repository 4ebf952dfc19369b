//! Spare boxes for the state of waiting futures, kept per thread.
//!
//! An async acquire that has to wait boxes its state (its queue node among it: see
//! `front::future::Slow`), so that the future itself stays a few words long for the uncontended
//! case. Each wait would then allocate a block of a few hundred bytes and free it when it ends: too
//! large for the allocator's small-block lists, and with many tasks waiting at once the allocator's
//! own per-thread cache (a handful of blocks of a size) overflows, so most waits went to its
//! general bins (about 230 instructions a wait, in callgrind, for the `malloc` and `free`). A
//! thread here keeps up to [`KEPT`] freed blocks of one layout (the first it frees; the waiting
//! state of every pool's and striped lock's future has the same one) and hands them to the next
//! boxes of that layout, last freed first out. Every block came from the global allocator with that
//! same layout, so a `Box` made in one is an ordinary box, and a block that is not kept is freed as
//! a box would be. The blocks a thread keeps are freed when it exits. 32 blocks (about 8 KiB a
//! thread): in the one-thread contended benchmark (1,000 tasks on 1,000 keys,
//! bench/async_contended.py) they served nearly as many waits as 64 did (1,600 and 1,592
//! instructions an operation; 16: 1,626).
//!
//! Under `--cfg keylock_loom` nothing is kept: the models see plain boxes.

#[cfg(not(keylock_loom))]
use std::alloc::Layout;
#[cfg(not(keylock_loom))]
use std::cell::RefCell;
#[cfg(not(keylock_loom))]
use std::ptr::NonNull;

/// The most blocks one thread keeps.
#[cfg(not(keylock_loom))]
const KEPT: usize = 32;

/// A thread's spare blocks, all of `layout`.
#[cfg(not(keylock_loom))]
struct Spares {
    layout: Option<Layout>,
    blocks: Vec<NonNull<u8>>,
}

#[cfg(not(keylock_loom))]
impl Spares {
    /// A block of `layout`, if one is kept.
    fn take(&mut self, layout: Layout) -> Option<NonNull<u8>> {
        if self.layout == Some(layout) {
            self.blocks.pop()
        } else {
            None
        }
    }

    /// Keeps `block` (of `layout`) if there is room for it: whether it was kept.
    fn keep(&mut self, block: NonNull<u8>, layout: Layout) -> bool {
        if *self.layout.get_or_insert(layout) != layout || self.blocks.len() >= KEPT {
            return false;
        }
        if self.blocks.capacity() == 0 {
            self.blocks.reserve_exact(KEPT);
        }
        self.blocks.push(block);
        true
    }
}

#[cfg(not(keylock_loom))]
impl Drop for Spares {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            for block in self.blocks.drain(..) {
                // SAFETY: every kept block came from the global allocator with `layout` (see
                // `SpareBox::drop`), and is kept nowhere else.
                unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(not(keylock_loom))]
thread_local! {
    static SPARES: RefCell<Spares> = const {
        RefCell::new(Spares {
            layout: None,
            blocks: Vec::new(),
        })
    };
}

/// A box for `value`, in one of this thread's spare blocks when it keeps one of the layout.
#[inline]
pub(crate) fn boxed<T>(value: T) -> Box<T> {
    boxed_with(move || value)
}

/// A box for what `make` returns, in one of this thread's spare blocks when it keeps one of
/// the layout, where the compiler can make the value in the block itself (`boxed` of a value
/// made first copies it in). A panic in `make` loses the block to the allocator, nothing else.
#[inline]
pub(crate) fn boxed_with<T>(make: impl FnOnce() -> T) -> Box<T> {
    #[cfg(not(keylock_loom))]
    {
        let layout = Layout::new::<T>();
        if layout.size() != 0
            && let Ok(Some(block)) = SPARES.try_with(|s| s.borrow_mut().take(layout))
        {
            let ptr = block.cast::<T>().as_ptr();
            // SAFETY: the block came from the global allocator with `T`'s layout and nothing
            // else uses it: a box of it, with the value written first, is what `Box::new`
            // would have made.
            unsafe {
                ptr.write(make());
                return Box::from_raw(ptr);
            }
        }
    }
    Box::new(make())
}

/// Drops a box made by [`boxed`], [`boxed_with`] (or `Box::new`): its value is dropped, and its block is kept
/// for the next box of the layout if this thread has room for it, else freed.
#[inline]
pub(crate) fn unbox<T>(b: Box<T>) {
    #[cfg(not(keylock_loom))]
    {
        let layout = Layout::new::<T>();
        if layout.size() != 0 {
            let ptr = Box::into_raw(b);
            // Dropped even if the value's drop panics, so that the block is never lost.
            let _block = SpareBox {
                // SAFETY: `Box::into_raw` never returns null.
                block: unsafe { NonNull::new_unchecked(ptr.cast::<u8>()) },
                layout,
            };
            // SAFETY: the value is valid and dropped once; its memory is `_block`'s from here.
            unsafe { std::ptr::drop_in_place(ptr) };
            return;
        }
    }
    drop(b);
}

/// A block whose value was dropped: kept by the thread, or freed, when this is dropped.
#[cfg(not(keylock_loom))]
struct SpareBox {
    block: NonNull<u8>,
    layout: Layout,
}

#[cfg(not(keylock_loom))]
impl Drop for SpareBox {
    fn drop(&mut self) {
        let kept = SPARES
            .try_with(|s| s.borrow_mut().keep(self.block, self.layout))
            .unwrap_or(false);
        if !kept {
            // SAFETY: the block came from the global allocator with `layout` (a box's memory),
            // its value was dropped, and it is kept nowhere.
            unsafe { std::alloc::dealloc(self.block.as_ptr(), self.layout) };
        }
    }
}

#[cfg(all(test, not(keylock_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>, [u64; 20]);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn kept() -> usize {
        SPARES.with(|s| s.borrow().blocks.len())
    }

    #[test]
    fn a_freed_block_is_made_again_and_values_dropped_once() {
        std::thread::spawn(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let a = boxed(Counted(drops.clone(), [1; 20]));
            let at = &*a as *const Counted;
            unbox(a);
            assert_eq!((drops.load(Ordering::SeqCst), kept()), (1, 1));
            let b = boxed(Counted(drops.clone(), [2; 20]));
            assert_eq!(&*b as *const Counted, at, "the kept block is used again");
            assert_eq!((b.1[19], kept()), (2, 0));
            drop(b); // an ordinary box: freed to the allocator
            assert_eq!((drops.load(Ordering::SeqCst), kept()), (2, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_keeps_at_most_its_share_of_one_layout() {
        std::thread::spawn(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let many: Vec<_> = (0..KEPT + 10)
                .map(|i| boxed(Counted(drops.clone(), [i as u64; 20])))
                .collect();
            many.into_iter().for_each(unbox);
            assert_eq!((drops.load(Ordering::SeqCst), kept()), (KEPT + 10, KEPT));
            // Another layout is neither kept nor served from the kept blocks.
            unbox(boxed([7u8; 3]));
            assert_eq!(*boxed(9u32), 9);
            assert_eq!(kept(), KEPT);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_panicking_drop_still_frees_or_keeps_the_block() {
        struct Bomb(#[allow(dead_code)] [u64; 4]);
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("boom");
            }
        }
        std::thread::spawn(|| {
            let r = std::panic::catch_unwind(|| unbox(boxed(Bomb([0; 4]))));
            assert!(r.is_err());
            assert_eq!(kept(), 1);
        })
        .join()
        .unwrap();
    }
}
