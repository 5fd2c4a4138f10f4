use super::*;
use crate::limiter::breaker::BreakerRules;
use crate::limiter::Limits;
use crate::store::CLIENT_KEYS;

/// What a subject of `key` and `values` gives back once kept.
fn kept(key: &[u8], values: &[Option<&[u8]>]) -> (Vec<u8>, Vec<Option<Vec<u8>>>) {
    let limits = Limits::default();
    let subject = Subject {
        key,
        limits: &limits,
        key_values: values,
        rules: BreakerRules::default(),
        rising: false,
    };
    let keys = KeptKeys::of(&subject);
    let all = keys.values();
    let back = all[..keys.limits()]
        .iter()
        .map(|v| v.map(<[u8]>::to_vec))
        .collect();
    (keys.key().to_vec(), back)
}

fn owned(values: &[Option<&[u8]>]) -> Vec<Option<Vec<u8>>> {
    values.iter().map(|v| v.map(<[u8]>::to_vec)).collect()
}

#[test]
fn the_key_and_values_come_back_as_given_inline_and_beyond() {
    let key = b"198.51.100.7";
    // Totals of 0, 47, 48, 49 and well beyond the inline room.
    let fills: [usize; 5] = [0, 47 - key.len(), 48 - key.len(), 49 - key.len(), 300];
    for fill in fills {
        let long = vec![b'n'; fill];
        let values: [Option<&[u8]>; 3] = [Some(&long), None, Some(b"")];
        let (k, v) = kept(key, &values);
        assert_eq!(k, key, "fill {fill}");
        assert_eq!(v, owned(&values), "fill {fill}");
    }
}

#[test]
fn an_empty_value_stays_apart_from_a_limit_without_one() {
    // `Some([])` leaves the request out of that limit; `None` counts it per
    // client key.
    let values: [Option<&[u8]>; 2] = [Some(b""), None];
    let (_, v) = kept(b"k", &values);
    assert_eq!(v, vec![Some(Vec::new()), None]);
}

#[test]
fn every_limit_may_have_a_value_and_no_more_are_kept() {
    let names: Vec<Vec<u8>> = (0..MAX_LIMITS + 2)
        .map(|i| format!("v{i}").into_bytes())
        .collect();
    let values: Vec<Option<&[u8]>> = names.iter().map(|n| Some(n.as_slice())).collect();
    let (k, v) = kept(b"client", &values);
    assert_eq!(k, b"client");
    assert_eq!(v, owned(&values[..MAX_LIMITS]));
}

#[test]
fn no_values_keep_the_key_alone() {
    let (k, v) = kept(b"2001:db8:1:2::/64", CLIENT_KEYS);
    assert_eq!(k, b"2001:db8:1:2::/64");
    assert!(v.is_empty());
}

#[test]
fn keys_written_over_kept_ones_are_those_kept_afresh() {
    let limits = Limits::default();
    let subject = |key, key_values| Subject {
        key,
        limits: &limits,
        key_values,
        rules: BreakerRules::default(),
        rising: false,
    };
    let long = vec![b'n'; 100];
    type Case<'a> = (&'a [u8], &'a [Option<&'a [u8]>]);
    let cases: [Case; 5] = [
        (b"198.51.100.7", &[Some(b"198.51.100.0/24"), None]),
        (b"203.0.113.9", &[Some(&long)]),
        (b"k", &[None, Some(b"v"), Some(b"")]),
        (b"client", CLIENT_KEYS),
        (b"198.51.100.7", &[Some(b"198.51.100.0/24"), None]),
    ];
    let mut kept = KeptKeys::of(&subject(b"first", &[Some(b"a"), Some(b"b"), Some(b"c")]));
    for (key, values) in cases {
        let s = subject(key, values);
        kept.write(&s);
        let afresh = KeptKeys::of(&s);
        assert_eq!(kept.key(), afresh.key());
        assert_eq!(kept.limits(), afresh.limits());
        assert_eq!(kept.values(), afresh.values());
    }
}
