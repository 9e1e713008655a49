//! Cgroups (bfq-cgroup.c, and bfq-iosched.c's `bfqq_request_over_limit`): which group a
//! queue is in (the root group for the cgroups `SchedEnv::root_cgroups` names), each
//! group's load kept up to date as its queues change (busy weight, busy queues, requests
//! allocated), and a queue's and its group's share of a request depth for
//! `bfq_limit_depth`. A group's weight is cgroup v2's default ([`GROUP_WEIGHT`]).

use super::Bfq;

/// A cgroup's BFQ weight (`io.bfq.weight`, cgroup v2's default; v1's
/// `BFQ_WEIGHT_LEGACY_DFL` is the same).
pub(super) const GROUP_WEIGHT: f64 = 100.0;

/// The root group's index in `Bfq::groups`.
pub(super) const ROOT_GROUP: usize = 0;

/// What `bfqq_request_over_limit` reads of one group (the root group or a cgroup's),
/// kept up to date where it changes (a queue enters or leaves the busy set, changes
/// weight while busy, gains or loses a request): the depth is asked for at every request
/// allocation, and a walk over all queues there took a tenth of a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct GroupLoad {
    /// Weights of its busy queues, summed ([`whole_weight`]: the shares are integer
    /// arithmetic in the kernel).
    pub(super) busy_weight: u64,
    /// Its busy queues: a cgroup's group with any is active in the root group's scheduler.
    busy_queues: u32,
    /// Its queues' requests held or in the driver (`Bfq::allocated`, summed).
    pub(super) allocated: u64,
}

impl Bfq {
    pub(super) fn is_root(&self, cgroup: u64) -> bool {
        !self.cgroups || self.root_cgroups.contains(&cgroup)
    }

    /// The group whose scheduler a queue is in: `None` for the root group.
    pub(super) fn group_key(&self, q: usize) -> Option<u64> {
        let qq = &self.queues[q];
        (!qq.root_group).then_some(qq.cgroup)
    }

    /// Requests of queue `q` that exist (`entity.allocated`: counted from `bfq_init_rq` at
    /// insertion to the request's freeing): held or in the driver.
    pub(super) fn allocated(&self, q: usize) -> u64 {
        let qq = &self.queues[q];
        qq.queued() as u64 + u64::from(qq.dispatched)
    }

    /// `bfqq_request_over_limit`: `limit` (the depth `bfq_limit_depth` gives the bio's
    /// kind) is shared out level by level, top down, in proportion to the weights on each
    /// level's service tree (`DIV_ROUND_CLOSEST(limit * weight, wsum)`); over it when the
    /// queue, or its group, already has that many requests. Only while the queue is on a
    /// service tree or in service (busy, here: the idle tree is not modelled). A group's
    /// weight is [`GROUP_WEIGHT`]; I/O priority classes are not modelled (one class).
    pub(super) fn request_over_limit(&self, q: usize, limit: u32) -> bool {
        let qq = &self.queues[q];
        if !qq.busy {
            return false;
        }
        self.check_group_loads_in_tests();
        // DIV_ROUND_CLOSEST(limit * weight, wsum).
        let share = |limit: u64, weight: u64, wsum: u64| -> u64 {
            let sum = wsum.max(1);
            (limit * weight + sum / 2) / sum
        };
        let mut limit = u64::from(limit);
        let group = &self.groups[qq.group];
        if qq.group != ROOT_GROUP {
            // The group's entity among the root group's: its queues and the active groups.
            let root = &self.groups[ROOT_GROUP];
            let group_weight = whole_weight(GROUP_WEIGHT);
            limit = share(
                limit,
                group_weight,
                root.busy_weight + group_weight * u64::from(self.active_groups),
            );
            if group.allocated >= limit {
                return true;
            }
        }
        self.allocated(q) >= share(limit, whole_weight(qq.weight()), group.busy_weight)
    }

    /// Queue `q`, of `weight`, joins (or leaves) the busy set: its group's load follows.
    pub(super) fn group_busy(&mut self, q: usize, weight: f64, joins: bool) {
        let weight = whole_weight(weight);
        let g = self.queues[q].group;
        let load = &mut self.groups[g];
        if joins {
            load.busy_weight += weight;
            load.busy_queues += 1;
        } else {
            load.busy_weight -= weight;
            load.busy_queues -= 1;
        }
        if g != ROOT_GROUP && load.busy_queues == u32::from(joins) {
            if joins {
                self.active_groups += 1;
            } else {
                self.active_groups -= 1;
            }
        }
    }

    /// Queue `q` had `before` requests allocated: its group's count follows its new one.
    pub(super) fn allocated_changed(&mut self, q: usize, before: u64) {
        let now = self.allocated(q);
        let load = &mut self.groups[self.queues[q].group];
        load.allocated = load.allocated + now - before;
    }

    /// [`Bfq::check_group_loads`] in tests and debug builds: at every depth decision, and
    /// at the simulator's every call (the state the previous one left), so an update site
    /// missed fails loudly.
    pub(super) fn check_group_loads_in_tests(&self) {
        if cfg!(any(test, debug_assertions)) {
            self.check_group_loads();
        }
    }

    /// The group loads kept as queues change against a recomputation from the queues.
    fn check_group_loads(&self) {
        let mut fresh = vec![GroupLoad::default(); self.groups.len()];
        for (i, qq) in self.queues.iter().enumerate() {
            let expected = if qq.root_group {
                ROOT_GROUP
            } else {
                self.group_index[&qq.cgroup]
            };
            assert_eq!(qq.group, expected, "queue {i}'s group index");
            let load = &mut fresh[qq.group];
            load.allocated += self.allocated(i);
            if qq.busy {
                load.busy_weight += whole_weight(qq.weight());
                load.busy_queues += 1;
            }
        }
        assert_eq!(
            fresh, self.groups,
            "BFQ's group loads drifted from its queues"
        );
        let active = fresh[1..].iter().filter(|g| g.busy_queues > 0).count();
        assert_eq!(self.active_groups as usize, active, "active cgroup groups");
    }
}

/// A queue's weight as the integer it is (I/O priority weights times raising
/// coefficients): what the kernel's `DIV_ROUND_CLOSEST` shares take.
pub(super) fn whole_weight(weight: f64) -> u64 {
    debug_assert!(weight >= 0.0 && weight.fract() == 0.0, "weight {weight}");
    weight as u64
}
