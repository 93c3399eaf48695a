//! The process's allocator (`main.rs` installs it): glibc for small blocks,
//! a mapping of its own for each block of 1 MiB or more, as glibc did with
//! its mmap threshold fixed at 1 MiB. What it adds: while a
//! [`reusing_large_blocks`] scope is open, a large block freed on any thread
//! is kept and handed to the next request of the same size, until the last
//! scope ends.
//!
//! Why: tract gives every operator a fresh output tensor. On IS-Net that is
//! about 870,000 fresh pages a run, each faulted in (about 1.6 µs a page
//! here), and a run frees and asks again for the same few sizes over and
//! over. Kept while a run lasts, they are reused instead; handed back when
//! it ends, so nothing is held between requests
//! (BENCHMARKS.md, "Large blocks kept during a run"). Each
//! large mapping also asks for transparent huge pages, so the pages a run
//! does fault in come 512 at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::{Mutex, MutexGuard};

/// Blocks from this size on get a mapping of their own.
const LARGE: usize = 1 << 20;
/// The most kept at once; a block freed beyond it is handed back.
const KEPT_BYTES: usize = 512 << 20;
const KEPT_BLOCKS: usize = 32;
const PAGE: usize = 4096;

pub struct Allocator;

/// Shared by every thread: tract's worker threads free blocks that the
/// run's own thread asked for.
struct Kept {
    /// Scopes open now, on any thread; blocks are kept while there is one.
    scopes: usize,
    /// Address and mapped length of each kept block; 0 marks a free slot.
    blocks: [(usize, usize); KEPT_BLOCKS],
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    scopes: 0,
    blocks: [(0, 0); KEPT_BLOCKS],
});

fn kept() -> MutexGuard<'static, Kept> {
    // Nothing panics while holding it, but a poisoned lock must not stop
    // every allocation after.
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` with the large blocks freed meanwhile kept for reuse; when the
/// last open scope ends, hands back what was kept.
pub fn reusing_large_blocks<R>(f: impl FnOnce() -> R) -> R {
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            let handed_back = {
                let mut kept = kept();
                kept.scopes -= 1;
                if kept.scopes > 0 {
                    return;
                }
                std::mem::replace(&mut kept.blocks, [(0, 0); KEPT_BLOCKS])
            };
            for (address, length) in handed_back.into_iter().filter(|&(a, _)| a != 0) {
                unmap(address as *mut u8, length);
            }
        }
    }
    kept().scopes += 1;
    let _scope = Scope;
    f()
}

fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

fn mapped_length(layout: Layout) -> usize {
    layout.size().next_multiple_of(PAGE)
}

/// A kept block made `length` long, if any is kept: one of that length,
/// else the shortest longer one, cut down, else the longest, grown. Its
/// pages are already faulted in, as far as they reach.
fn take_kept(length: usize) -> Option<*mut u8> {
    let (address, kept_length) = {
        let mut kept = kept();
        let slot = kept
            .blocks
            .iter_mut()
            .filter(|slot| slot.0 != 0)
            .min_by_key(|&&mut (_, kept_length)| {
                // Exact first, then longer by how much, then shorter by how much.
                match kept_length.cmp(&length) {
                    std::cmp::Ordering::Equal => (0, 0),
                    std::cmp::Ordering::Greater => (1, kept_length - length),
                    std::cmp::Ordering::Less => (2, length - kept_length),
                }
            })?;
        std::mem::take(slot)
    };
    let address = address as *mut u8;
    if kept_length == length {
        return Some(address);
    }
    let moved = remap(address, kept_length, length);
    if moved.is_null() {
        unmap(address, kept_length);
        return None;
    }
    Some(moved)
}

/// Keeps the block if a scope is open and there is room for it.
fn keep(address: *mut u8, length: usize) -> bool {
    let mut kept = kept();
    let held: usize = kept.blocks.iter().map(|&(_, length)| length).sum();
    if kept.scopes == 0 || held + length > KEPT_BYTES {
        return false;
    }
    match kept.blocks.iter_mut().find(|slot| slot.0 == 0) {
        Some(slot) => {
            *slot = (address as usize, length);
            true
        }
        None => false,
    }
}

fn map(length: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    // Transparent huge pages where the system allows them (`madvise` or
    // `always`): the block's pages are then faulted in 2 MiB at a time, not
    // 4 KiB, and every fault costs about as much. A tract run of U2NetP
    // took 10,000 faults instead of 60,000 and was 18% shorter
    // (BENCHMARKS.md, "Huge pages for large blocks"). Only a hint: where
    // the kernel has none it fails, and 4 KiB pages serve.
    // SAFETY: advice about a mapping just made and ours alone; it changes
    // no contents.
    unsafe { libc::madvise(address, length, libc::MADV_HUGEPAGE) };
    address.cast()
}

fn unmap(address: *mut u8, length: usize) {
    // SAFETY: `address` and `length` are a whole mapping made by `map` (or
    // moved by `mremap`) whose block nobody holds any more.
    unsafe { libc::munmap(address.cast(), length) };
}

/// The mapping at `address` made `to` bytes long, its pages kept as far as
/// they reach, moved if it must be; null if it cannot be.
fn remap(address: *mut u8, from: usize, to: usize) -> *mut u8 {
    // SAFETY: `address` and `from` are a whole mapping of ours that nobody
    // else holds.
    let moved = unsafe { libc::mremap(address.cast(), from, to, libc::MREMAP_MAYMOVE) };
    if moved == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        moved.cast()
    }
}

// SAFETY: small blocks are glibc's; a large block is a mapping of its own,
// page aligned (so any alignment up to a page holds), its length worked out
// from the layout the same way when it is made, kept, reused and unmapped.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc(layout) };
        }
        let length = mapped_length(layout);
        take_kept(length).unwrap_or_else(|| map(length))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        }
        let length = mapped_length(layout);
        match take_kept(length) {
            Some(address) => {
                // SAFETY: the kept block is `length` bytes, and ours alone.
                unsafe { address.write_bytes(0, length) };
                address
            }
            // A fresh mapping reads as zeros.
            None => map(length),
        }
    }

    unsafe fn dealloc(&self, address: *mut u8, layout: Layout) {
        if !is_large(layout) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.dealloc(address, layout) };
        }
        let length = mapped_length(layout);
        if !keep(address, length) {
            unmap(address, length);
        }
    }

    unsafe fn realloc(&self, address: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `layout.align()` is valid and
        // `new_size`, rounded up to it, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_large(layout), is_large(new_layout)) {
            // SAFETY: the caller's contract, passed on.
            (false, false) => unsafe { System.realloc(address, layout, new_size) },
            // A large block grows or shrinks with its pages, as glibc's did,
            // with no copy.
            (true, true) => remap(address, mapped_length(layout), mapped_length(new_layout)),
            // Across the threshold: a block of the other kind, and a copy.
            _ => {
                // SAFETY: `new_layout` is valid and not zero sized (one side is large).
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks hold at least the smaller size,
                    // and they are distinct.
                    unsafe {
                        std::ptr::copy_nonoverlapping(address, new, layout.size().min(new_size));
                        self.dealloc(address, layout);
                    }
                }
                new
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// The kept blocks are the process's: one test at a time looks at them.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn alone() -> MutexGuard<'static, ()> {
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn nothing_kept() -> bool {
        kept().blocks.iter().all(|&(address, _)| address == 0)
    }

    fn block(size: usize) -> Layout {
        Layout::from_size_align(size, 64).unwrap()
    }

    #[test]
    fn a_freed_large_block_is_reused_inside_a_scope_and_handed_back_after() {
        let _alone = alone();
        let allocator = Allocator;
        let (first, second, third) = reusing_large_blocks(|| unsafe {
            let first = allocator.alloc(block(3 * MIB));
            first.write_bytes(7, 3 * MIB);
            allocator.dealloc(first, block(3 * MIB));
            let second = allocator.alloc(block(3 * MIB));
            // Another size gets a mapping of its own.
            let third = allocator.alloc(block(5 * MIB));
            allocator.dealloc(third, block(5 * MIB));
            allocator.dealloc(second, block(3 * MIB));
            (first, second, third)
        });
        assert_eq!(first, second, "the same size reuses the freed block");
        assert_ne!(third, first);
        assert!(nothing_kept());
    }

    /// The `VmFlags` of the mapping that holds `address`, from `/proc/self/smaps`.
    fn vm_flags(address: *mut u8) -> String {
        let address = address as usize;
        let hex = |digits: &str| usize::from_str_radix(digits, 16).ok();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut holds = false;
        for line in smaps.lines() {
            let range = line
                .split(' ')
                .next()
                .and_then(|range| range.split_once('-'));
            if let Some((start, end)) =
                range.and_then(|(start, end)| Some((hex(start)?, hex(end)?)))
            {
                holds = (start..end).contains(&address);
            } else if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| holds) {
                return flags.trim().to_string();
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[test]
    fn a_large_block_asks_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return; // a kernel without them refuses the advice
        }
        let _alone = alone();
        let allocator = Allocator;
        unsafe {
            let large = allocator.alloc(block(4 * MIB));
            let flags = vm_flags(large);
            allocator.dealloc(large, block(4 * MIB));
            assert!(flags.split(' ').any(|flag| flag == "hg"), "VmFlags {flags}");
        }
    }

    #[test]
    fn outside_a_scope_nothing_is_kept() {
        let _alone = alone();
        let allocator = Allocator;
        unsafe {
            let first = allocator.alloc(block(2 * MIB));
            allocator.dealloc(first, block(2 * MIB));
        }
        assert!(nothing_kept());
    }

    #[test]
    fn a_reused_block_asked_for_zeroed_is_zeroed() {
        let _alone = alone();
        let allocator = Allocator;
        reusing_large_blocks(|| unsafe {
            let dirty = allocator.alloc(block(2 * MIB));
            dirty.write_bytes(0xAB, 2 * MIB);
            allocator.dealloc(dirty, block(2 * MIB));
            let clean = allocator.alloc_zeroed(block(2 * MIB));
            assert_eq!(clean, dirty);
            let bytes = std::slice::from_raw_parts(clean, 2 * MIB);
            assert!(bytes.iter().all(|&b| b == 0));
            allocator.dealloc(clean, block(2 * MIB));
        });
    }

    #[test]
    fn a_scope_keeps_no_more_than_its_cap() {
        let _alone = alone();
        let allocator = Allocator;
        reusing_large_blocks(|| unsafe {
            let size = KEPT_BYTES / 2 + MIB;
            let a = allocator.alloc(block(size));
            let b = allocator.alloc(block(size));
            allocator.dealloc(a, block(size));
            allocator.dealloc(b, block(size));
            let held: usize = kept().blocks.iter().map(|&(_, length)| length).sum();
            assert_eq!(held, mapped_length(block(size)), "the second did not fit");
        });
    }

    #[test]
    fn blocks_keep_their_bytes_across_every_kind_of_realloc() {
        let _alone = alone();
        let allocator = Allocator;
        unsafe {
            let mut size = 1000;
            let mut address = allocator.alloc(block(size));
            for (i, byte) in std::slice::from_raw_parts_mut(address, size)
                .iter_mut()
                .enumerate()
            {
                *byte = i as u8;
            }
            // small → large → larger → small
            for new_size in [2 * MIB, 9 * MIB + 5, 700] {
                address = allocator.realloc(address, block(size), new_size);
                assert!(!address.is_null());
                let bytes = std::slice::from_raw_parts(address, 700);
                assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
                size = new_size;
            }
            allocator.dealloc(address, block(size));
        }
    }
}
