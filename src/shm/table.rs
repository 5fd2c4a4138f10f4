//! A table in shared memory: nginx's rbtree for lookup plus a queue for LRU
//! order, the layout `limit_req` uses. Entries are fixed-size (~250 bytes, a
//! 256-byte slab slot, the size a sliding window needs): about 4 k entries
//! per MB. One size for every table, so that whatever is given up for room
//! frees a slot any table can use.

use core::cmp::Ordering;
use core::mem::offset_of;
use core::ptr;

use nginx_sys::{
    ngx_queue_init, ngx_queue_insert_after, ngx_queue_remove, ngx_queue_t, ngx_rbt_red,
    ngx_rbtree_delete, ngx_rbtree_init, ngx_rbtree_insert, ngx_rbtree_key_t, ngx_rbtree_node_t,
    ngx_rbtree_t,
};

use super::Allocator;
use pow_shield_core::cluster::refusals::LocalRefusal;
use pow_shield_core::limiter::breaker::StrikeCounter;
use pow_shield_core::limiter::window::SlidingWindow;
use pow_shield_core::store::breaker_generation::REMEMBERED_BITS;
use pow_shield_core::store::spent::LIFETIME_CLASSES;
pub use pow_shield_core::store::TableKey;
use pow_shield_core::store::INLINE_KEY;

/// What an entry holds besides its key: a sliding window (local limiter), a
/// client's breaker (strikes table), a refusal Redis decided (cluster
/// mode's refusals table), or nothing (replay cache). All are plain
/// integers, so any bytes are a valid value of each.
#[repr(C)]
#[derive(Clone, Copy)]
union Payload {
    window: SlidingWindow,
    strikes: StrikeCounter,
    refusal: LocalRefusal,
}

/// The slab slot an entry fills: 256 bytes (a window's 16 slots need more
/// than the 24 bytes a 128-byte one leaves); more would double the zone's
/// cost.
pub const ENTRY_SLOT: usize = 256;
const _: () = assert!(core::mem::size_of::<Entry>() <= ENTRY_SLOT);

/// Where an entry keeps its key (part of the zone's layout: `MAGIC`).
pub(super) const KEY_OFFSET: usize = core::mem::offset_of!(Entry, key);

/// One entry: a sliding window, a client's breaker or a spent token. The
/// key's length is the tree node's spare byte (`rb.data`, which nginx's
/// rbtree never reads), and a bucket's remembered breaker generation its
/// padding: the window's 256 bytes are full to the last.
#[repr(C)]
pub struct Entry {
    rb: Node,
    lru: ngx_queue_t,
    /// When the entry carries no information any more (window emptied,
    /// token expired, strikes forgotten): it may then be removed.
    pub expires_at_ms: u64,
    payload: Payload,
    key: [u8; INLINE_KEY],
}

impl Entry {
    /// The sliding window of a buckets-table entry (zeroed when new).
    pub fn window(&mut self) -> &mut SlidingWindow {
        // SAFETY: every field of every payload is an integer; any bytes are
        // a valid SlidingWindow.
        unsafe { &mut self.payload.window }
    }

    /// The breaker of a strikes-table entry (zeroed when new).
    pub fn strikes(&mut self) -> &mut StrikeCounter {
        // SAFETY: as in `window`.
        unsafe { &mut self.payload.strikes }
    }

    /// The refusal of a refusals-table entry (zeroed when new).
    pub fn refusal(&mut self) -> &mut LocalRefusal {
        // SAFETY: as in `window`.
        unsafe { &mut self.payload.refusal }
    }

    /// The breaker generation a bucket remembers its client was last found
    /// without a breaker at (`store::breaker_generation`; 0 when new).
    #[cfg(target_pointer_width = "64")]
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        u64::from(self.rb.generation_low) | u64::from(self.rb.generation_high) << 16
    }

    /// A 32-bit node has no room for a generation (two spare bytes, too few
    /// for one that cannot come round): a value no remembered generation
    /// equals, so the straight path searches the breaker table every time.
    #[cfg(not(target_pointer_width = "64"))]
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        u64::MAX
    }

    /// Remembers `generation` (of `breaker_generation::remembered`).
    #[cfg(target_pointer_width = "64")]
    #[inline(always)]
    pub fn remember_generation(&mut self, generation: u64) {
        self.rb.generation_low = generation as u16;
        self.rb.generation_high = (generation >> 16) as u32;
    }

    /// (Nothing remembered on a 32-bit node: see [`Entry::generation`].)
    #[cfg(not(target_pointer_width = "64"))]
    #[inline(always)]
    pub fn remember_generation(&mut self, _generation: u64) {}

    /// The key's length tag (`TableKey::len_tag`).
    fn len(&self) -> u8 {
        self.rb.data
    }

    fn stored_key(&self) -> &[u8] {
        &self.key[..usize::from(self.len().min(INLINE_KEY as u8))]
    }

    fn order(&self, hash: ngx_rbtree_key_t, len: u8, key: &[u8]) -> Ordering {
        (hash, len, key).cmp(&(self.rb.key, self.len(), self.stored_key()))
    }

    /// [`Entry::order`] of a whole [`TableKey`]: the same order (past its
    /// length a key's 32 bytes are zeros, in the entry as in the key), but
    /// equal keys, what every lookup ends on, are found by four word
    /// compares instead of a call to `memcmp`. (Inline in every walk.)
    #[inline(always)]
    fn order_of(&self, key: &TableKey) -> Ordering {
        let hash = key.hash() as ngx_rbtree_key_t;
        match (hash, key.len_tag()).cmp(&(self.rb.key, self.len())) {
            Ordering::Equal if words(key.bytes()) == words(&self.key) => Ordering::Equal,
            Ordering::Equal => key.bytes().cmp(&self.key),
            unequal => unequal,
        }
    }
}

/// nginx's `ngx_rbtree_node_t` with its padding named: the same fields at
/// the same offsets (asserted below), then, on a 64-bit machine, the six
/// bytes the C struct pads to its alignment, which nginx never reads or
/// writes (its tree code moves nodes by their links, never copies one).
/// (A 32-bit node pads two bytes: left unnamed and unused.)
#[repr(C)]
struct Node {
    key: ngx_rbtree_key_t,
    left: *mut ngx_rbtree_node_t,
    right: *mut ngx_rbtree_node_t,
    parent: *mut ngx_rbtree_node_t,
    color: u8,
    data: u8,
    /// A bucket's remembered breaker generation
    /// (`store::breaker_generation`), low 16 bits, then high 32.
    #[cfg(target_pointer_width = "64")]
    generation_low: u16,
    #[cfg(target_pointer_width = "64")]
    generation_high: u32,
}

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<Node>() == size_of::<ngx_rbtree_node_t>());
    assert!(align_of::<Node>() == align_of::<ngx_rbtree_node_t>());
    assert!(offset_of!(Node, key) == offset_of!(ngx_rbtree_node_t, key));
    assert!(offset_of!(Node, left) == offset_of!(ngx_rbtree_node_t, left));
    assert!(offset_of!(Node, right) == offset_of!(ngx_rbtree_node_t, right));
    assert!(offset_of!(Node, parent) == offset_of!(ngx_rbtree_node_t, parent));
    assert!(offset_of!(Node, color) == offset_of!(ngx_rbtree_node_t, color));
    assert!(offset_of!(Node, data) == offset_of!(ngx_rbtree_node_t, data));
    #[cfg(target_pointer_width = "64")]
    assert!(offset_of!(Node, generation_low) > offset_of!(ngx_rbtree_node_t, data));
    assert!(REMEMBERED_BITS == 48);
};

impl Node {
    /// The node as nginx's tree functions take it.
    fn raw(&mut self) -> *mut ngx_rbtree_node_t {
        ptr::from_mut(self).cast()
    }
}

/// Where a bucket keeps its remembered generation (part of the zone's
/// layout: `MAGIC`).
#[cfg(target_pointer_width = "64")]
pub(super) const GENERATION_OFFSET: usize = offset_of!(Node, generation_low);
#[cfg(not(target_pointer_width = "64"))]
pub(super) const GENERATION_OFFSET: usize = 0;

/// A key's 32 bytes as four words (compared, never ordered).
#[inline]
fn words(bytes: &[u8; INLINE_KEY]) -> [u64; 4] {
    let mut w = [0u64; 4];
    for (word, chunk) in w.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(b);
    }
    w
}

/// An rbtree of entries with its queues (most recent at the head): queue 0
/// is the LRU order of every table; the spent table keeps one queue per
/// lifetime class (`store::spent`), in each of which insertion order is
/// close to expiry order, so that a long-lived record never holds up the
/// reclaiming of shorter ones behind it.
#[repr(C)]
pub struct Table {
    tree: ngx_rbtree_t,
    sentinel: ngx_rbtree_node_t,
    queues: [ngx_queue_t; LIFETIME_CLASSES],
    /// Entries in the table now (for metrics; changed under the zone lock).
    entries: u64,
    /// Unexpired entries given up to make room, since the zone was made.
    evictions: u64,
    /// Entries inserted since the zone was made: the breaker table's
    /// generation (`store::breaker_generation`).
    inserted: u64,
}

impl Table {
    /// Initialises a table in place (it points into itself).
    ///
    /// # Safety
    /// `this` is writable memory for a `Table` that never moves afterwards.
    pub unsafe fn init(this: *mut Table) {
        // SAFETY: per the contract; nginx's helpers initialise the fields.
        unsafe {
            ngx_rbtree_init(
                ptr::addr_of_mut!((*this).tree),
                ptr::addr_of_mut!((*this).sentinel),
                Some(insert_entry),
            );
            let queues = ptr::addr_of_mut!((*this).queues).cast::<ngx_queue_t>();
            for i in 0..LIFETIME_CLASSES {
                ngx_queue_init(queues.add(i));
            }
            ptr::addr_of_mut!((*this).entries).write(0);
            ptr::addr_of_mut!((*this).evictions).write(0);
            ptr::addr_of_mut!((*this).inserted).write(0);
        }
    }

    /// Finds `key` and marks it most recently used. (Inline: local mode's
    /// every request finds its window; a call costs a third of a lookup.)
    #[inline(always)]
    pub fn find(&mut self, key: &TableKey) -> Option<&mut Entry> {
        let entry: *mut Entry = self.get(key)?;
        // SAFETY: `get` returned a linked entry of this table.
        let entry = unsafe { &mut *entry };
        self.touch(entry);
        Some(entry)
    }

    /// Finds `key`, leaving the LRU order alone (the replay cache keeps
    /// insertion order, close to expiry order, so `expire` finds the
    /// expired records at the tail).
    #[inline]
    pub fn get(&mut self, key: &TableKey) -> Option<&mut Entry> {
        let sentinel = self.tree.sentinel;
        let mut node = self.tree.root;
        while node != sentinel {
            // SAFETY: every non-sentinel node of this tree is an Entry's `rb`
            // (its first field), allocated by `insert` under the zone lock.
            let entry = unsafe { &mut *node.cast::<Entry>() };
            node = match entry.order_of(key) {
                Ordering::Less => entry.rb.left,
                Ordering::Greater => entry.rb.right,
                Ordering::Equal => return Some(entry),
            };
        }
        None
    }

    /// Inserts a fresh entry for `key` (the caller checked it is absent)
    /// at the head of the LRU queue. Returns `None` when the zone has no
    /// memory left.
    pub fn insert(&mut self, key: &TableKey, alloc: &Allocator) -> Option<&mut Entry> {
        self.insert_in(key, alloc, 0)
    }

    /// As [`Table::insert`], at the head of queue `queue` (a lifetime
    /// class; out of range: the last).
    pub fn insert_in(
        &mut self,
        key: &TableKey,
        alloc: &Allocator,
        queue: usize,
    ) -> Option<&mut Entry> {
        let head: *mut ngx_queue_t = &mut self.queues[queue.min(LIFETIME_CLASSES - 1)];
        let entry = alloc.alloc(core::mem::size_of::<Entry>()).cast::<Entry>();
        if entry.is_null() {
            return None;
        }
        // SAFETY: fresh slab memory of Entry's size, aligned to its slot size
        // (a power of two >= 8); every field is written before use.
        unsafe {
            ptr::write_bytes(entry, 0, 1);
            let e = &mut *entry;
            e.rb.key = key.hash() as ngx_rbtree_key_t;
            e.rb.data = key.len_tag();
            e.key = *key.bytes();
            // The insert callback lives in this process's copy of the module;
            // refresh it so a tree created by another build never calls a
            // stale address.
            self.tree.insert = Some(insert_entry);
            ngx_rbtree_insert(&mut self.tree, e.rb.raw());
            ngx_queue_insert_after(head, &mut e.lru);
            self.entries += 1;
            self.inserted = self.inserted.wrapping_add(1);
            Some(e)
        }
    }

    /// Removes `key`'s entry, if there is one.
    pub fn remove_key(&mut self, key: &TableKey, alloc: &Allocator) {
        if let Some(entry) = self.get(key) {
            let entry: *mut Entry = entry;
            self.remove(entry, alloc);
        }
    }

    /// Removes up to `n` expired entries from the tail of each queue.
    pub fn expire(&mut self, alloc: &Allocator, now_ms: u64, n: usize) {
        for queue in 0..LIFETIME_CLASSES {
            for _ in 0..n {
                match self.tail(queue) {
                    // SAFETY: `tail` returns a linked entry of this table.
                    Some(e) if unsafe { (*e).expires_at_ms } <= now_ms => self.remove(e, alloc),
                    _ => break,
                }
            }
        }
    }

    /// As [`Table::expire`], for a table whose entries are all in queue 0
    /// (buckets, breakers: least recently used first): the other queues,
    /// always empty there, are not looked at.
    /// Most requests find nothing expired: the tail is looked at inline,
    /// and only an expired one calls in the loop.
    #[inline]
    pub fn expire_lru(&mut self, alloc: &Allocator, now_ms: u64, n: usize) {
        // SAFETY: `tail` returns a linked entry of this table.
        if n > 0
            && self
                .tail(0)
                .is_some_and(|e| unsafe { (*e).expires_at_ms } <= now_ms)
        {
            self.expire_lru_tail(alloc, now_ms, n);
        }
    }

    /// [`Table::expire_lru`] once the tail has expired.
    #[inline(never)]
    fn expire_lru_tail(&mut self, alloc: &Allocator, now_ms: u64, n: usize) {
        for _ in 0..n {
            match self.tail(0) {
                // SAFETY: `tail` returns a linked entry of this table.
                Some(e) if unsafe { (*e).expires_at_ms } <= now_ms => self.remove(e, alloc),
                _ => break,
            }
        }
    }

    /// Moves `entry` to the head of queue `queue` (a lifetime class).
    pub fn requeue(&mut self, entry: &mut Entry, queue: usize) {
        let head: *mut ngx_queue_t = &mut self.queues[queue.min(LIFETIME_CLASSES - 1)];
        // SAFETY: the entry is linked in one of this table's queues.
        unsafe {
            ngx_queue_remove(&mut entry.lru);
            ngx_queue_insert_after(head, &mut entry.lru);
        }
    }

    /// Removes up to `n` least recently used entries, expired or not: what
    /// the zone gives up when it is full. Returns how many it removed.
    pub fn evict(&mut self, alloc: &Allocator, n: usize) -> usize {
        let mut removed = 0;
        while removed < n {
            let Some(e) = self.oldest() else { break };
            self.remove(e, alloc);
            removed += 1;
        }
        self.evictions += removed as u64;
        removed
    }

    /// As [`Table::evict`], but an entry `keep` says must stay is moved to
    /// the front instead (up to `n` of them are passed over).
    pub fn evict_unless(
        &mut self,
        alloc: &Allocator,
        n: usize,
        mut keep: impl FnMut(&mut Entry) -> bool,
    ) -> usize {
        let (mut removed, mut kept) = (0, 0);
        while removed < n && kept < n {
            let Some(e) = self.oldest() else { break };
            // SAFETY: `oldest` returns a linked entry of this table.
            let entry = unsafe { &mut *e };
            if keep(entry) {
                self.touch(entry);
                kept += 1;
            } else {
                self.remove(e, alloc);
                removed += 1;
            }
        }
        self.evictions += removed as u64;
        removed
    }

    /// Removes every entry but those `keep` says must stay.
    pub fn retain(&mut self, alloc: &Allocator, mut keep: impl FnMut(&mut Entry) -> bool) {
        for queue in 0..LIFETIME_CLASSES {
            let head: *mut ngx_queue_t = &mut self.queues[queue];
            // SAFETY: the queue is initialised; every queued link is the
            // `lru` field of an Entry; the next link is read before an
            // entry goes.
            unsafe {
                let mut link = (*head).next;
                while link != head {
                    let next = (*link).next;
                    let e = link.byte_sub(offset_of!(Entry, lru)).cast::<Entry>();
                    if !keep(&mut *e) {
                        self.remove(e, alloc);
                    }
                    link = next;
                }
            }
        }
    }

    /// When the first of the queues' oldest entries expires, if there is
    /// one.
    pub fn oldest_expires_at_ms(&mut self) -> Option<u64> {
        (0..LIFETIME_CLASSES)
            .filter_map(|queue| self.tail(queue))
            // SAFETY: `tail` returns a linked entry of this table.
            .map(|e| unsafe { (*e).expires_at_ms })
            .min()
    }

    /// The least recently used entry (the LRU queue's tail).
    fn oldest(&mut self) -> Option<*mut Entry> {
        self.tail(0)
    }

    #[inline]
    fn tail(&mut self, queue: usize) -> Option<*mut Entry> {
        let head: *mut ngx_queue_t = &mut self.queues[queue];
        // SAFETY: the queue is initialised; `prev` of the head is the tail.
        let last = unsafe { (*head).prev };
        if last == head {
            return None;
        }
        // SAFETY: every queued link is the `lru` field of an Entry.
        Some(unsafe { last.byte_sub(offset_of!(Entry, lru)).cast::<Entry>() })
    }

    /// Moves `entry` (of this table) to the front of its LRU queue, as
    /// [`Table::find`] does to what it finds.
    pub fn touch(&mut self, entry: &mut Entry) {
        self.requeue(entry, 0);
    }

    fn remove(&mut self, entry: *mut Entry, alloc: &Allocator) {
        // SAFETY: `entry` is linked in this table; it is unlinked from both
        // structures before its memory goes back to the slab.
        unsafe {
            ngx_queue_remove(ptr::addr_of_mut!((*entry).lru));
            ngx_rbtree_delete(&mut self.tree, (*entry).rb.raw());
        }
        alloc.free(entry.cast());
        self.entries = self.entries.saturating_sub(1);
    }

    /// Entries inserted since the zone was made (the breaker table's
    /// generation).
    #[inline(always)]
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Entries now, and entries evicted since the zone was made.
    pub fn stats(&self) -> (u64, u64) {
        (self.entries, self.evictions)
    }
}

/// The tree's insert callback: orders by (hash, length, key bytes), the same
/// total order `find` walks.
unsafe extern "C" fn insert_entry(
    mut temp: *mut ngx_rbtree_node_t,
    node: *mut ngx_rbtree_node_t,
    sentinel: *mut ngx_rbtree_node_t,
) {
    // SAFETY: nginx calls this with the root, the node being inserted and the
    // sentinel of a tree whose nodes are all Entries (see Table::insert).
    unsafe {
        let new = &*node.cast::<Entry>();
        loop {
            let here = &mut *temp.cast::<Entry>();
            let next = match new.order(here.rb.key, here.len(), here.stored_key()) {
                // `order` compares the argument against `new`: reversed.
                Ordering::Greater => &mut here.rb.left,
                _ => &mut here.rb.right,
            };
            if *next == sentinel {
                *next = node;
                break;
            }
            temp = *next;
        }
        (*node).parent = temp;
        (*node).left = sentinel;
        (*node).right = sentinel;
        ngx_rbt_red(node);
    }
}
