//! The order a node's steps are carried out in: a list, then the steps
//! its steps led to, each list in its order (what a FIFO queue of them
//! does, without one: `RedisStore::execute`).

/// Carries out `steps` in order with `carry_out`, which appends the steps
/// one leads to; those are carried out once the whole list is, in turn.
/// Returns the emptied list (its room, for the next steps).
pub fn in_turn<S>(mut steps: Vec<S>, mut carry_out: impl FnMut(S, &mut Vec<S>)) -> Vec<S> {
    let mut more = Vec::new();
    loop {
        for step in steps.drain(..) {
            carry_out(step, &mut more);
        }
        if more.is_empty() {
            return steps;
        }
        core::mem::swap(&mut steps, &mut more);
    }
}

#[cfg(test)]
mod tests {
    use super::in_turn;

    #[test]
    fn the_steps_a_step_leads_to_come_after_the_rest_of_its_list() {
        let mut seen = Vec::new();
        in_turn(vec![1, 2, 3], |step, more| {
            seen.push(step);
            if step < 100 {
                more.push(step * 10);
            }
        });
        assert_eq!(seen, [1, 2, 3, 10, 20, 30, 100, 200, 300]);
    }
}
