//! Taking a strike back (SPEC §5), decided in one place: what each thing
//! that happens to a client gives back of its strikes. The stores carry it
//! out: the zone at once (`store::run`), Redis by the spend script's mode
//! (`scripts::args::spend_mode`) and the window scripts' `waited`.
//!
//! Only an unpaid strike ever comes back (a 429's, never a failed
//! verification's, a replay's or a trap's), at most one per refusal, never
//! below 0.

/// What happened that may give a strike back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// A solution was accepted. `struck`: its 429 counted a strike (the
    /// token's `st`); `waited_out`: that 429's `Retry-After` has ended (the
    /// token's `ra`), so a wait may have given the strike back already.
    Paid { struck: bool, waited_out: bool },
    /// A solution of a challenge sent ahead with a 200 (pay-ahead): no
    /// 429, so no strike.
    PaidAhead,
    /// A solution the zone recorded while Redis was unavailable, written
    /// to Redis once it answers (whatever the breaker says there).
    PaidDuringOutage,
    /// Admitted without paying under the limit that refused the client
    /// lately, after that refusal's `Retry-After`: waiting is paying with
    /// time.
    Waited,
    /// A call Redis ran past its deadline: it wrote nothing, struck
    /// nothing, so there is nothing to give back.
    Late,
    /// A replayed solution (itself a strike).
    Replayed,
    /// A failed verification (itself a strike).
    Failed,
    /// A trap hit (itself a strike).
    Trap,
}

/// What comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Back {
    Nothing,
    /// One unpaid strike, if the client holds one.
    OneUnpaid,
    /// One unpaid strike, or, where the store holds none yet (cluster
    /// mode: the 429's strike is in a node's batch still on its way), owed
    /// until it arrives: a client that pays every challenge is never
    /// blocked, whichever nodes it pays on.
    OneUnpaidOrOwed,
}

/// The one rule.
pub fn strike_back(case: Case) -> Back {
    match case {
        // A strike a wait may have given back already is not given twice
        // (never owed).
        Case::Paid {
            struck: true,
            waited_out: true,
        } => Back::OneUnpaid,
        Case::Paid {
            struck: true,
            waited_out: false,
        } => Back::OneUnpaidOrOwed,
        Case::PaidDuringOutage | Case::Waited => Back::OneUnpaid,
        Case::Paid { struck: false, .. }
        | Case::PaidAhead
        | Case::Late
        | Case::Replayed
        | Case::Failed
        | Case::Trap => Back::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_case_gives_back_at_most_one_unpaid_strike() {
        #[rustfmt::skip]
        let table = [
            ("paid", Case::Paid { struck: true, waited_out: false }, Back::OneUnpaidOrOwed),
            ("paid after its Retry-After", Case::Paid { struck: true, waited_out: true }, Back::OneUnpaid),
            ("paid, its 429 struck nothing", Case::Paid { struck: false, waited_out: false }, Back::Nothing),
            ("paid ahead", Case::PaidAhead, Back::Nothing),
            ("paid during an outage", Case::PaidDuringOutage, Back::OneUnpaid),
            ("waited", Case::Waited, Back::OneUnpaid),
            ("late", Case::Late, Back::Nothing),
            ("replayed", Case::Replayed, Back::Nothing),
            ("failed", Case::Failed, Back::Nothing),
            ("trap", Case::Trap, Back::Nothing),
        ];
        for (name, case, want) in table {
            assert_eq!(strike_back(case), want, "{name}");
        }
    }
}
