//! The allocator the Python extension and the benches install as the global allocator
//! ([`SplitAlloc`]): small blocks from mimalloc, large ones from the system allocator. The core
//! itself never installs it; a binary chooses its allocator.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

/// Blocks of at most this many bytes come from mimalloc.
pub const SMALL_MAX: usize = 4096;

/// Small blocks (≤ [`SMALL_MAX`] bytes) from mimalloc, larger ones from the system allocator.
///
/// A routing decision allocates small vectors per running query (each counterfactual
/// after-state) and frees most of them at once: mimalloc serves those faster than glibc's malloc.
/// Large buffers (a month's trace columns, a workload's queries) stay with glibc, which keeps
/// freed memory for the next run where mimalloc's fresh pages must first be zeroed by the kernel
/// (measured in `docs/tuner.md` and `docs/emulator.md`).
pub struct SplitAlloc;

fn small(size: usize) -> bool {
    size <= SMALL_MAX
}

// SAFETY: every block is freed or resized by the allocator that made it. Which one made it
// depends only on the layout's size, and `GlobalAlloc` guarantees that `dealloc` and `realloc`
// receive the very layout the block was allocated with. `realloc` keeps a block with its
// allocator when old and new sizes fall on the same side, and otherwise allocates the new
// block from the other allocator, copies min(old, new) bytes (both blocks are valid for that
// many) and frees the old block with its own allocator; the new layout is valid because the
// caller guarantees that `new_size`, rounded up to the (valid) alignment, does not overflow
// `isize`. Both allocators honour the layout's alignment, and errors (null) are passed through
// unchanged, with the old block untouched.
unsafe impl GlobalAlloc for SplitAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if small(layout.size()) {
            MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if small(layout.size()) {
            MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if small(layout.size()) {
            MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (small(layout.size()), small(new_size)) {
            (true, true) => MiMalloc.realloc(ptr, layout, new_size),
            (false, false) => System.realloc(ptr, layout, new_size),
            _ => {
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                let new = self.alloc(new_layout);
                if !new.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                new
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_keep_their_bytes_when_they_change_allocator() {
        let a = SplitAlloc;
        for align in [1usize, 8, 64] {
            let small_layout = Layout::from_size_align(64, align).unwrap();
            // SAFETY: every pointer comes from `a` with the layout passed back, is checked
            // non-null, and is written and read only within the size it was last given.
            unsafe {
                let p = a.alloc(small_layout);
                assert!(!p.is_null() && (p as usize).is_multiple_of(align));
                for i in 0..64 {
                    *p.add(i) = i as u8;
                }
                // Small → large (mimalloc → system), large → larger, then back to small.
                let big = SMALL_MAX * 4;
                let q = a.realloc(p, small_layout, big);
                assert!(!q.is_null() && (q as usize).is_multiple_of(align));
                assert!((0..64).all(|i| *q.add(i) == i as u8));
                *q.add(big - 1) = 7;
                let big_layout = Layout::from_size_align(big, align).unwrap();
                let r = a.realloc(q, big_layout, big * 2);
                assert!((0..64).all(|i| *r.add(i) == i as u8) && *r.add(big - 1) == 7);
                let s = a.realloc(r, Layout::from_size_align(big * 2, align).unwrap(), 32);
                assert!(!s.is_null() && (0..32).all(|i| *s.add(i) == i as u8));
                a.dealloc(s, Layout::from_size_align(32, align).unwrap());
                let z = a.alloc_zeroed(big_layout);
                assert!((0..big).all(|i| *z.add(i) == 0));
                a.dealloc(z, big_layout);
            }
        }
    }
}
