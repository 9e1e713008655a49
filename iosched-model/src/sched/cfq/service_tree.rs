//! CFQ's service trees (cfq-iosched.c `cfq_service_tree_add`, `cfq_slice_offset`,
//! `cfq_del_cfqq_rr`, `cfq_choose_cfqg`, `cfq_get_next_queue`, `__cfq_set_active_queue`): a
//! busy queue's place by `rb_key`, the busy counts kept as queues join and leave the tree,
//! each group's list of queues ready to serve, and the next queue put in service: of the
//! group of least `vdisktime`, RT before BE before IDLE, the smallest `rb_key`. A group's
//! workload trees are one list here; their queue counts and think times are per tree
//! (`tree_count`, `tree_index`).

use crate::sched::Decision;

use super::{CLASS_IDLE, CLASS_RT, Cfq, WorkloadType};

/// Preemption puts the new queue this far ahead of the first one (`-HZ`).
const FRONT_NS: i64 = 1_000_000_000;

/// `(class, rb_key, queue)` as one number ordered as the tuple: the `ready` lists are
/// searched at every insertion and dispatch, and one wide comparison is several times
/// cheaper than the tuple's three (`relist` was a tenth of a CFQ replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ReadyKey(u128);

impl ReadyKey {
    /// Bits of the queue index, below the class's 8 and the key's 64.
    const QUEUE_BITS: u32 = 56;

    fn new(class: u8, rb_key: i64, q: usize) -> ReadyKey {
        assert!(
            (q as u128) < 1 << Self::QUEUE_BITS,
            "queue {q} beyond the ready key"
        );
        // The sign bit flipped: i64 order as u64 order.
        let key = (rb_key as u64) ^ (1 << 63);
        ReadyKey(
            (u128::from(class) << (64 + Self::QUEUE_BITS))
                | (u128::from(key) << Self::QUEUE_BITS)
                | q as u128,
        )
    }

    fn queue(self) -> usize {
        (self.0 & ((1 << Self::QUEUE_BITS) - 1)) as usize
    }
}

/// Service trees per group in `Cfq::tree_ttime`: by class (1..=3) and workload type.
pub(super) const TREES_PER_GROUP: usize = 4 * 3;

fn wl_index(t: WorkloadType) -> u8 {
    match t {
        WorkloadType::Sync => 0,
        WorkloadType::SyncNoIdle => 1,
        WorkloadType::Async => 2,
    }
}

impl Cfq {
    /// Busy queues on `q`'s service tree (same group, class and workload type).
    pub(super) fn tree_count(&self, q: usize) -> usize {
        let qq = &self.queues[q];
        let (g, class, t) = (qq.group, qq.class, qq.wl_type());
        self.queues
            .iter()
            .filter(|o| o.on_rr && o.group == g && o.class == class && o.wl_type() == t)
            .count()
    }

    /// `q`'s service tree in `tree_ttime`.
    pub(super) fn tree_index(&self, q: usize) -> usize {
        let qq = &self.queues[q];
        qq.group * TREES_PER_GROUP + usize::from(qq.class) * 3 + usize::from(wl_index(qq.wl_type()))
    }

    /// Onto the service tree (`cfq_service_tree_add`).
    pub(super) fn add_rr(&mut self, q: usize, now: u64, front: bool) {
        let g = self.queues[q].group;
        let key = if front {
            let first = self
                .queues
                .iter()
                .enumerate()
                .filter(|(i, o)| *i != q && o.on_rr && o.group == g)
                .map(|(_, o)| o.rb_key)
                .min()
                .unwrap_or(now as i64);
            first - FRONT_NS
        } else {
            // `cfq_slice_offset`: (other busy queues of the group) x (the longest slice -
            // this queue's): lower priorities start later.
            let qq = &self.queues[q];
            let others = self.groups[g].busy.saturating_sub(u32::from(qq.on_rr));
            let offset = u64::from(others)
                * self
                    .prio_slice(true, 0)
                    .saturating_sub(self.prio_slice(qq.sync, qq.prio));
            let k = now as i64 + offset as i64 - qq.slice_resid;
            self.queues[q].slice_resid = 0;
            k
        };
        let qq = &mut self.queues[q];
        qq.rb_key = key;
        if !qq.on_rr {
            qq.on_rr = true;
            self.busy += 1;
            self.count_busy(q, true);
            self.group_queue_added(g);
        }
        self.relist(q);
    }

    pub(super) fn del_rr(&mut self, q: usize) {
        if self.queues[q].on_rr {
            self.queues[q].on_rr = false;
            self.busy -= 1;
            self.count_busy(q, false);
            self.group_queue_removed(self.queues[q].group);
        }
        self.relist(q);
    }

    /// The busy-queue counters, as `q` joins (`on`) or leaves the service tree.
    fn count_busy(&mut self, q: usize, on: bool) {
        let qq = &self.queues[q];
        let (sync, class) = (qq.sync, qq.class);
        let gg = &mut self.groups[qq.group];
        let step = |n: &mut u32| {
            if on { *n += 1 } else { *n -= 1 }
        };
        step(&mut gg.busy_by_rt[usize::from(class == CLASS_RT)]);
        if sync {
            step(&mut self.busy_sync);
            if class != CLASS_IDLE {
                step(&mut gg.busy_sync_non_idle);
            }
        }
    }

    /// Keeps `q`'s entry in its group's `ready` list in step with its state: listed by
    /// (class, rb_key) while on the tree with requests. Called after every change of
    /// `on_rr`, `rb_key` or the emptiness of `sorted`.
    pub(super) fn relist(&mut self, q: usize) {
        let qq = &self.queues[q];
        let want = (qq.on_rr && !qq.sorted.is_empty()).then_some((qq.class, qq.rb_key));
        if want == qq.listed {
            return;
        }
        let ready = &mut self.groups[qq.group].ready;
        if let Some((class, key)) = qq.listed {
            let at = ready
                .binary_search(&ReadyKey::new(class, key, q))
                .expect("a listed queue is in its group's list");
            ready.remove(at);
        }
        if let Some((class, key)) = want {
            let entry = ReadyKey::new(class, key, q);
            let at = ready
                .binary_search(&entry)
                .expect_err("an unlisted queue is not in its group's list");
            ready.insert(at, entry);
        }
        self.queues[q].listed = want;
    }

    /// The next queue: of the group with the least `vdisktime` (`cfq_choose_cfqg`), RT,
    /// then BE, then IDLE; in each, the smallest `rb_key`.
    pub(super) fn pick_next(&mut self) -> Option<usize> {
        let min = self.min_vdisktime;
        // The least (vdisktime, group), then the group's first by (class, rb_key, queue):
        // the least (vdisktime, group, class, rb_key, queue) over queues on the tree with
        // requests.
        let (_, g) = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, gg)| !gg.ready.is_empty())
            .map(|(g, gg)| (gg.vdisktime.wrapping_sub(min) as i64, g))
            .min()?;
        let q = self.groups[g].ready[0].queue();
        // `update_min_vdisktime`: it only moves forward.
        let vt = self.groups[self.queues[q].group].vdisktime;
        if vt.wrapping_sub(min) as i64 > 0 {
            self.min_vdisktime = vt;
        }
        let now = self.now;
        let qq = &mut self.queues[q];
        qq.slice_new = true;
        qq.dispatch_start = now;
        qq.allocated_slice = 0;
        qq.slice_start = 0;
        qq.wait_busy = false;
        qq.slice_end = 0;
        qq.slice_dispatch = 0;
        qq.slice_sectors = 0;
        qq.fifo_checked = false;
        let (stream, sync) = (qq.stream, qq.sync);
        self.active = Some(q);
        self.log(Decision::InService {
            stream,
            sync,
            budget: 0,
        });
        Some(q)
    }
}
