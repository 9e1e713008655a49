//! blkio cgroups (cfq-iosched.c with `CONFIG_CFQ_GROUP_IOSCHED`): the weights given
//! (`--set weight.ID=W`), a cgroup's group (`cfq_lookup_cfqg`), the group service tree
//! (`cfq_group_service_tree_add`, `cfq_group_notify_queue_add`/`_del`), a group's charge at
//! each expiration (`cfq_group_served`: time, or requests in IOPS mode, over its share),
//! preemption across groups (`cfqg_is_descendant`), and `wait_busy` for a group's last
//! queue (`cfq_should_wait_busy`). The hierarchy is flat: every group a child of the root.

use rustc_hash::FxHashMap;

use crate::sched::{Decision, OWN_GROUP_CGROUP, SettingError, Settings};

use super::service_tree::TREES_PER_GROUP;
use super::{Cfq, Group, HZ, JIFFY_NS, Ttime};

/// `CFQ_SERVICE_SHIFT`: `vdisktime` and a group's share (`vfraction`) are fixed point.
pub(super) const SERVICE_SHIFT: u32 = 12;

/// `CFQ_WEIGHT_LEGACY_DFL`; the root group's is twice it (`cfq_cpd_init`).
pub(super) const WEIGHT_DEFAULT: u32 = 500;

/// The range blkio.weight accepts.
const WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 10..=1000;

/// `CFQ_SLICE_MODE_GROUP_DELAY`: how far behind the last group a group joining the tree
/// starts. The kernel adds it unshifted to the shifted `vdisktime` (so it is worth ~49 µs
/// of a whole device's time): kept as it is.
const GROUP_DELAY: u64 = 1_000_000_000 / 5;

/// `CFQ_IOPS_MODE_GROUP_DELAY` (`HZ / 5`, in jiffies, also unshifted).
const GROUP_DELAY_IOPS: u64 = HZ / 5;

/// Splits `weight.ID=W` settings (blkio.weight of cgroup ID, `root` or `own_group`) from
/// the others.
pub(super) fn group_weights(s: &Settings) -> Result<(Settings, FxHashMap<u64, u64>), SettingError> {
    let mut rest = Settings::default();
    let mut weights = FxHashMap::default();
    for (k, v) in &s.0 {
        let Some(id) = k.strip_prefix("weight.") else {
            rest.0.insert(k.clone(), v.clone());
            continue;
        };
        let bad = |why| SettingError::Bad {
            key: k.clone(),
            value: v.clone(),
            why,
        };
        let cgroup =
            match id {
                "root" => None,
                "own_group" => Some(OWN_GROUP_CGROUP),
                _ => Some(id.parse::<u64>().map_err(|_| {
                    bad("expected weight.ID with ID a cgroup id, root or own_group")
                })?),
            };
        let w = v
            .parse::<u32>()
            .ok()
            .filter(|w| WEIGHT_RANGE.contains(w))
            .ok_or_else(|| bad("a blkio.weight is 10..1000"))?;
        // The root group's key: no recorded cgroup has it.
        weights.insert(cgroup.unwrap_or(ROOT_KEY), u64::from(w));
    }
    Ok((rest, weights))
}

/// `weights`' key for the root group.
pub(super) const ROOT_KEY: u64 = u64::MAX;

impl Cfq {
    /// The group of `cgroup` (`cfq_lookup_cfqg`), made on its first request.
    pub(super) fn group_for(&mut self, cgroup: u64, now: u64) -> usize {
        if self.root_cgroups.contains(&cgroup) {
            return 0;
        }
        if let Some(g) = self.group_by_cgroup.get(&cgroup) {
            return *g;
        }
        let weight = self
            .weights
            .get(&cgroup)
            .copied()
            .unwrap_or(u64::from(WEIGHT_DEFAULT));
        let mut g = Group::new(cgroup, weight);
        g.ttime.last_end_request = now;
        self.groups.push(g);
        self.tree_ttime
            .resize(self.groups.len() * TREES_PER_GROUP, Ttime::default());
        self.group_by_cgroup.insert(cgroup, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// `iops_mode`: no idling on a queueing device; groups are charged by requests.
    fn iops_mode(&self) -> bool {
        self.slice_idle == 0 && self.hw_tag()
    }

    /// `cfq_group_service_tree_add`: on the tree, with its share of the weights there
    /// (the hierarchy flat: its weight over the sum of the groups' on the tree).
    fn group_tree_add(&mut self, g: usize) {
        self.groups[g].on_tree = true;
        let total: u64 = self
            .groups
            .iter()
            .filter(|x| x.on_tree)
            .map(|x| x.weight)
            .sum();
        let gg = &mut self.groups[g];
        gg.vfraction = ((gg.weight << SERVICE_SHIFT) / total.max(1)).max(1);
    }

    /// `cfq_group_notify_queue_add`: a queue of `g` joined the service tree; a group not on
    /// its tree joins it behind the last one.
    pub(super) fn group_queue_added(&mut self, g: usize) {
        self.groups[g].busy += 1;
        if self.groups[g].on_tree {
            return;
        }
        let delay = if self.iops_mode() {
            GROUP_DELAY_IOPS
        } else {
            GROUP_DELAY
        };
        let min = self.min_vdisktime;
        self.groups[g].vdisktime = self
            .groups
            .iter()
            .filter(|x| x.on_tree)
            .map(|x| x.vdisktime)
            .max_by_key(|v| v.wrapping_sub(min) as i64)
            .map_or(min, |v| v.wrapping_add(delay));
        self.group_tree_add(g);
    }

    /// `cfq_group_notify_queue_del`: the group leaves the tree with its last queue.
    pub(super) fn group_queue_removed(&mut self, g: usize) {
        let gg = &mut self.groups[g];
        gg.busy = gg.busy.saturating_sub(1);
        if gg.busy == 0 {
            gg.on_tree = false;
            gg.vfraction = 0;
        }
    }

    /// `cfq_group_served`: charges `q`'s group for the queue's service, in time (requests
    /// in IOPS mode; a lone async queue its whole slice), scaled by the inverse of the
    /// group's share, and moves it on the tree.
    pub(super) fn group_served(&mut self, q: usize) {
        let g = self.queues[q].group;
        let nr_sync = self.groups[g].busy_sync_non_idle;
        let used = self.slice_usage(q);
        let qq = &self.queues[q];
        let charge = if self.iops_mode() {
            u64::from(qq.slice_dispatch)
        } else if !qq.sync && nr_sync == 0 {
            qq.allocated_slice
        } else {
            used
        };
        let (stream, sync) = (qq.stream, qq.sync);
        let gg = &mut self.groups[g];
        let vfr = gg.vfraction.max(1);
        gg.vdisktime = gg
            .vdisktime
            .wrapping_add((charge << (2 * SERVICE_SHIFT)) / vfr);
        if gg.on_tree {
            self.group_tree_add(g);
        }
        let gg = &self.groups[g];
        let (cgroup, weight, share) = (gg.cgroup, gg.weight, gg.vfraction);
        // Only worth a line when there are groups to tell apart.
        if self.groups.len() > 1 {
            self.log(Decision::GroupServed {
                stream,
                sync,
                cgroup,
                weight: weight as u32,
                share_pct: ((100 * share) >> SERVICE_SHIFT) as u32,
                charge,
                iops: self.iops_mode(),
            });
        }
    }

    /// `cfqg_is_descendant(active, new)`: a request of `new`'s group may preempt only a
    /// queue of its own group or of a group below it (every group is below the root).
    pub(super) fn may_preempt_group(&self, active: usize, new: usize) -> bool {
        active == new || new == 0
    }

    /// `cfq_should_wait_busy`: the emptied active queue is its group's last, the group
    /// thinks less than group_idle, and the slice is used or about to be.
    pub(super) fn should_wait_busy(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let gg = &self.groups[qq.group];
        if !qq.sorted.is_empty() || gg.busy > 1 || gg.ttime.big(self.group_idle) {
            return false;
        }
        if self.slice_used(q, self.now) {
            return true;
        }
        let left = qq.slice_end.saturating_sub(self.now);
        (qq.ttime.valid() && left < qq.ttime.mean) || left <= JIFFY_NS
    }
}
