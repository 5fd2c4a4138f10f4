//! Where a location's `key=` values come from, worked out once at
//! configuration time: which limits count per a `key=` of their own,
//! which share one with a limit before them, and which is the client's
//! network. A request follows the plan instead of finding that out again
//! from its limits (one step per keyed limit, nothing for the others).

use super::{KeyId, Limits, MAX_LIMITS};

/// Where one keyed limit's value comes from. `S`: how the module evaluates
/// a `key=` text (its compiled value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFrom<S> {
    /// `key=$pow_shield_net` alone: the client's network, which the module
    /// makes without nginx's variables.
    Net,
    /// Its `key=` text, evaluated.
    Source(S),
    /// The same `key=` text as the limit at this place, before it: that
    /// limit's value, not evaluated again.
    Same(u8),
}

/// One keyed limit: its place among the location's limits, and where its
/// value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyStep<S> {
    pub place: u8,
    pub from: KeyFrom<S>,
}

/// The steps of a location's keyed limits, in the order written (a limit
/// without `key=` has none: it counts per client key).
#[derive(Clone, Copy, Debug)]
pub struct KeyPlan<S> {
    steps: [Option<KeyStep<S>>; MAX_LIMITS],
    len: u8,
}

impl<S: Copy> KeyPlan<S> {
    /// No limit has a `key=`.
    pub const NONE: KeyPlan<S> = KeyPlan {
        steps: [None; MAX_LIMITS],
        len: 0,
    };

    /// The plan of `limits`: `net` is the identity of the `key=` text
    /// `$pow_shield_net`, `source` gives the compiled value of any other.
    pub fn of(limits: &Limits, net: KeyId, source: impl Fn(KeyId) -> S) -> Self {
        let mut plan = Self::NONE;
        let all = limits.as_slice();
        for (i, limit) in all.iter().enumerate() {
            let Some(id) = limit.key else {
                continue;
            };
            let earlier = all[..i].iter().position(|l| l.key == Some(id));
            let from = match earlier {
                Some(j) => KeyFrom::Same(j as u8),
                None if id == net => KeyFrom::Net,
                None => KeyFrom::Source(source(id)),
            };
            plan.steps[usize::from(plan.len)] = Some(KeyStep {
                place: i as u8,
                from,
            });
            plan.len += 1;
        }
        plan
    }

    /// The steps, one per keyed limit, in the order written.
    pub fn steps(&self) -> impl Iterator<Item = KeyStep<S>> + '_ {
        self.steps[..usize::from(self.len)]
            .iter()
            .flatten()
            .copied()
    }

    /// Writes the keyed limits' values into `values` at their places:
    /// `eval` gives a `Net` or `Source` step's value (none: the request
    /// fails), a `Same` step takes the value at its earlier place. The
    /// places of limits without `key=` are left as they are.
    pub fn fill<V: Copy>(
        &self,
        values: &mut [Option<V>; MAX_LIMITS],
        mut eval: impl FnMut(KeyFrom<S>) -> Option<V>,
    ) -> Option<()> {
        for step in self.steps() {
            let value = match step.from {
                KeyFrom::Same(place) => values.get(usize::from(place)).copied().flatten(),
                from => Some(eval(from)?),
            };
            *values.get_mut(usize::from(step.place))? = value;
        }
        Some(())
    }

    /// No limit has a `key=`: every limit counts per client key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<S: Copy> Default for KeyPlan<S> {
    fn default() -> Self {
        Self::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Limit, RateLimit};

    const NET: &str = "$pow_shield_net";

    fn limit(requests: u32, key: Option<&str>) -> Limit {
        let limit = Limit::new(RateLimit {
            requests,
            window_ms: 1_000,
        });
        match key {
            Some(key) => limit.keyed(KeyId::of(key)),
            None => limit,
        }
    }

    fn plan(lines: &[Limit]) -> Vec<(u8, KeyFrom<&'static str>)> {
        let mut limits = Limits::NONE;
        for line in lines {
            limits.add(*line).unwrap();
        }
        let source = |id: KeyId| match id {
            id if id == KeyId::of("$http_x_api_key") => "$http_x_api_key",
            id if id == KeyId::of("$host") => "$host",
            _ => "?",
        };
        KeyPlan::of(&limits, KeyId::of(NET), source)
            .steps()
            .map(|step| (step.place, step.from))
            .collect()
    }

    #[test]
    fn limits_without_key_have_no_step() {
        assert!(plan(&[]).is_empty());
        assert!(plan(&[limit(10, None), limit(20, None)]).is_empty());
        let limits = Limits::of(limit(10, None));
        assert!(KeyPlan::of(&limits, KeyId::of(NET), |_| ()).is_empty());
    }

    #[test]
    fn each_keyed_limit_has_a_step_at_its_place() {
        let steps = plan(&[
            limit(10, None),
            limit(20, Some(NET)),
            limit(30, None),
            limit(40, Some("$http_x_api_key")),
        ]);
        assert_eq!(
            steps,
            [(1, KeyFrom::Net), (3, KeyFrom::Source("$http_x_api_key")),]
        );
    }

    #[test]
    fn a_key_written_again_takes_the_first_ones_value() {
        let steps = plan(&[
            limit(10, Some("$host")),
            limit(20, Some(NET)),
            limit(30, Some("$host")),
            limit(40, Some(NET)),
        ]);
        assert_eq!(
            steps,
            [
                (0, KeyFrom::Source("$host")),
                (1, KeyFrom::Net),
                (2, KeyFrom::Same(0)),
                (3, KeyFrom::Same(1)),
            ]
        );
    }

    fn limits(lines: &[Limit]) -> Limits {
        let mut limits = Limits::NONE;
        for line in lines {
            limits.add(*line).unwrap();
        }
        limits
    }

    #[test]
    fn a_request_evaluates_each_key_once_and_copies_it_to_its_later_limits() {
        let limits = limits(&[
            limit(10, Some("$host")),
            limit(20, Some(NET)),
            limit(30, None),
            limit(40, Some("$host")),
            limit(50, Some(NET)),
        ]);
        let plan = KeyPlan::of(&limits, KeyId::of(NET), |_| "$host");
        let mut evaluated = Vec::new();
        let mut values = [None; MAX_LIMITS];
        let filled = plan.fill(&mut values, |from| {
            evaluated.push(from);
            Some(match from {
                KeyFrom::Net => "198.51.100.0/24",
                _ => "api.example",
            })
        });
        assert_eq!(filled, Some(()));
        let (h, n) = (Some("api.example"), Some("198.51.100.0/24"));
        assert_eq!(values, [h, n, None, h, n, None, None, None]);
        assert_eq!(evaluated, [KeyFrom::Source("$host"), KeyFrom::Net]);
    }

    #[test]
    fn a_request_whose_key_cannot_be_evaluated_fails() {
        let limits = limits(&[limit(10, Some(NET)), limit(20, Some("$host"))]);
        let plan = KeyPlan::of(&limits, KeyId::of(NET), |_| "$host");
        let mut values = [None; MAX_LIMITS];
        let filled = plan.fill(&mut values, |from| match from {
            KeyFrom::Net => Some(1),
            _ => None,
        });
        assert_eq!(filled, None);
    }

    #[test]
    fn an_empty_key_value_stays_empty_in_the_limits_that_share_it() {
        // (An empty value leaves the request out of those limits: it is a
        // value, not "per client key".)
        let limits = limits(&[limit(10, Some("$host")), limit(20, Some("$host"))]);
        let plan = KeyPlan::of(&limits, KeyId::of(NET), |_| "$host");
        let mut values = [Some("kept"); MAX_LIMITS];
        plan.fill(&mut values, |_| Some("")).unwrap();
        assert_eq!(&values[..3], [Some(""), Some(""), Some("kept")]);
    }

    #[test]
    fn eight_keyed_limits_fit() {
        let keys = ["$host", NET, "$http_x_api_key", "$host"];
        let lines: Vec<Limit> = (0..MAX_LIMITS)
            .map(|i| limit(i as u32 + 1, Some(keys[i % keys.len()])))
            .collect();
        let steps = plan(&lines);
        assert_eq!(steps.len(), MAX_LIMITS);
        assert_eq!(steps[7], (7, KeyFrom::Same(0)));
    }
}
