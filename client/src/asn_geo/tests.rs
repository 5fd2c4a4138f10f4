use super::*;

fn networks(first: &str, last: &str) -> Vec<String> {
    let line = format!("{first}\t{last}\t64496\tZZ\tEXAMPLE");
    let range = AsRange::parse(&line).unwrap();
    range.networks().iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_range_becomes_the_fewest_networks_that_cover_it_exactly() {
    let table: &[(&str, &str, &[&str])] = &[
        ("192.0.2.0", "192.0.2.255", &["192.0.2.0/24"]),
        ("192.0.2.7", "192.0.2.7", &["192.0.2.7/32"]),
        ("192.0.2.0", "192.0.2.1", &["192.0.2.0/31"]),
        ("192.0.2.1", "192.0.2.2", &["192.0.2.1/32", "192.0.2.2/32"]),
        (
            "192.0.2.1",
            "192.0.2.254",
            &[
                "192.0.2.1/32",
                "192.0.2.2/31",
                "192.0.2.4/30",
                "192.0.2.8/29",
                "192.0.2.16/28",
                "192.0.2.32/27",
                "192.0.2.64/26",
                "192.0.2.128/26",
                "192.0.2.192/27",
                "192.0.2.224/28",
                "192.0.2.240/29",
                "192.0.2.248/30",
                "192.0.2.252/31",
                "192.0.2.254/32",
            ],
        ),
        (
            "198.51.100.0",
            "198.51.101.127",
            &["198.51.100.0/24", "198.51.101.0/25"],
        ),
        ("0.0.0.0", "255.255.255.255", &["0.0.0.0/0"]),
        ("0.0.0.0", "0.0.0.0", &["0.0.0.0/32"]),
        (
            "255.255.255.255",
            "255.255.255.255",
            &["255.255.255.255/32"],
        ),
        (
            "0.0.0.1",
            "255.255.255.255",
            &[
                "0.0.0.1/32",
                "0.0.0.2/31",
                "0.0.0.4/30",
                "0.0.0.8/29",
                "0.0.0.16/28",
                "0.0.0.32/27",
                "0.0.0.64/26",
                "0.0.0.128/25",
                "0.0.1.0/24",
                "0.0.2.0/23",
                "0.0.4.0/22",
                "0.0.8.0/21",
                "0.0.16.0/20",
                "0.0.32.0/19",
                "0.0.64.0/18",
                "0.0.128.0/17",
                "0.1.0.0/16",
                "0.2.0.0/15",
                "0.4.0.0/14",
                "0.8.0.0/13",
                "0.16.0.0/12",
                "0.32.0.0/11",
                "0.64.0.0/10",
                "0.128.0.0/9",
                "1.0.0.0/8",
                "2.0.0.0/7",
                "4.0.0.0/6",
                "8.0.0.0/5",
                "16.0.0.0/4",
                "32.0.0.0/3",
                "64.0.0.0/2",
                "128.0.0.0/1",
            ],
        ),
        (
            "2001:db8::",
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            &["2001:db8::/32"],
        ),
        ("2001:db8::1", "2001:db8::1", &["2001:db8::1/128"]),
        (
            "2001:db8::",
            "2001:db8:1:ffff:ffff:ffff:ffff:ffff",
            &["2001:db8::/47"],
        ),
        (
            "2001:db8::",
            "2001:db8:2:ffff:ffff:ffff:ffff:ffff",
            &["2001:db8::/47", "2001:db8:2::/48"],
        ),
        ("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", &["::/0"]),
    ];
    for (first, last, want) in table {
        assert_eq!(&networks(first, last), want, "{first} - {last}");
    }
}

#[test]
fn a_whole_family_but_its_two_ends_takes_two_networks_per_bit() {
    let got = networks("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe");
    assert_eq!(got.len(), 2 * 127);
    assert_eq!(got[0], "::1/128");
    assert_eq!(got[127], "8000::/2");
    assert_eq!(got[253], "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/128");
}

#[test]
fn the_networks_of_a_range_are_disjoint_and_cover_it_exactly() {
    // every range in a window of IPv4 addresses, checked address by address
    for start in 0u128..40 {
        for end in start..40 {
            let mut next = start;
            for n in cidrs(Family::V4, start, end) {
                let IpAddr::V4(a) = n.address else {
                    panic!("IPv4 in, IPv6 out")
                };
                assert_eq!(u128::from(u32::from(a)), next, "{start}-{end}: {n}");
                next += 1u128 << (32 - n.prefix);
            }
            assert_eq!(next, end + 1, "{start}-{end}");
        }
    }
}

#[test]
fn malformed_lines_say_what_is_wrong() {
    let table: &[(&str, LineError)] = &[
        ("", LineError::Columns(1)),
        ("192.0.2.0 192.0.2.255 64496 ZZ X", LineError::Columns(1)),
        ("192.0.2.0\t192.0.2.255", LineError::Columns(2)),
        (
            "192.0.2\t192.0.2.255\t64496\tZZ\tX",
            LineError::Address("192.0.2".into()),
        ),
        (
            "192.0.2.0\t192.0.2.256\t64496\tZZ\tX",
            LineError::Address("192.0.2.256".into()),
        ),
        (
            "192.0.2.0/24\t192.0.2.255\t64496\tZZ\tX",
            LineError::Address("192.0.2.0/24".into()),
        ),
        (
            "192.0.2.0\t192.0.2.255\tAS64496\tZZ\tX",
            LineError::AsNumber("AS64496".into()),
        ),
        (
            "192.0.2.0\t192.0.2.255\t-1\tZZ\tX",
            LineError::AsNumber("-1".into()),
        ),
        (
            "192.0.2.0\t192.0.2.255\t4294967296\tZZ\tX",
            LineError::AsNumber("4294967296".into()),
        ),
        (
            "192.0.2.0\t2001:db8::\t64496\tZZ\tX",
            LineError::MixedFamilies("192.0.2.0".parse().unwrap(), "2001:db8::".parse().unwrap()),
        ),
        (
            "192.0.2.255\t192.0.2.0\t64496\tZZ\tX",
            LineError::Reversed("192.0.2.255".parse().unwrap(), "192.0.2.0".parse().unwrap()),
        ),
    ];
    for (line, want) in table {
        assert_eq!(&AsRange::parse(line).unwrap_err(), want, "{line:?}");
    }
}

#[test]
fn the_description_and_country_are_not_read_and_crlf_is_accepted() {
    let r = AsRange::parse("192.0.2.0\t192.0.2.255\t4294967295\r").unwrap();
    assert_eq!(
        (r.start, r.end, r.asn),
        (0xc000_0200, 0xc000_02ff, u32::MAX)
    );
    let r = AsRange::parse("192.0.2.0\t192.0.2.255\t64496\tZZ\tA\tB\tC D").unwrap();
    assert_eq!(r.asn, 64496);
}

fn convert(keep: Keep, lines: &[&str]) -> Result<Vec<String>, ParseError> {
    let mut c = Converter::new(keep);
    for (i, l) in lines.iter().enumerate() {
        c.add_line(i + 1, l)?;
    }
    Ok(c.finish().iter().map(|e| e.to_string()).collect())
}

const TABLE: &[&str] = &[
    "0.0.0.0\t0.255.255.255\t0\tNone\tNot routed",
    "192.0.2.0\t192.0.2.127\t64496\tZZ\tEXAMPLE-A",
    "192.0.2.128\t192.0.2.255\t64496\tZZ\tEXAMPLE-A",
    "198.51.100.0\t198.51.100.255\t0\tNone\tNot routed",
    "",
    "203.0.113.0\t203.0.113.255\t64497\tZZ\tEXAMPLE-B",
    "2001:db8::\t2001:db8:ffff:ffff:ffff:ffff:ffff:ffff\t64496\tZZ\tEXAMPLE-A",
    "2001:db9::\t2001:db9::ff\t0\tNone\tNot routed",
];

#[test]
fn unrouted_ranges_are_left_out_and_adjacent_ranges_of_one_as_merged() {
    assert_eq!(
        convert(Keep::Both, TABLE).unwrap(),
        [
            "192.0.2.0/24 AS64496;",
            "203.0.113.0/24 AS64497;",
            "2001:db8::/32 AS64496;",
        ]
    );
}

#[test]
fn one_family_can_be_kept_alone() {
    assert_eq!(
        convert(Keep::V4, TABLE).unwrap(),
        ["192.0.2.0/24 AS64496;", "203.0.113.0/24 AS64497;"]
    );
    assert_eq!(
        convert(Keep::V6, TABLE).unwrap(),
        ["2001:db8::/32 AS64496;"]
    );
}

#[test]
fn ranges_of_different_ases_or_with_a_gap_are_not_merged() {
    let lines = [
        "192.0.2.0\t192.0.2.127\t64496\tZZ\tA",
        "192.0.2.128\t192.0.2.255\t64497\tZZ\tB",
        "192.0.3.1\t192.0.3.255\t64497\tZZ\tB",
    ];
    assert_eq!(
        convert(Keep::Both, &lines).unwrap()[..2],
        ["192.0.2.0/25 AS64496;", "192.0.2.128/25 AS64497;"]
    );
    assert_eq!(
        convert(Keep::Both, &lines).unwrap()[2],
        "192.0.3.1/32 AS64497;"
    );
}

#[test]
fn the_families_may_come_in_any_order_but_each_sorted() {
    let lines = [
        "2001:db8::\t2001:db8::ff\t64496\tZZ\tA",
        "192.0.2.0\t192.0.2.255\t64496\tZZ\tA",
    ];
    assert_eq!(
        convert(Keep::Both, &lines).unwrap(),
        ["192.0.2.0/24 AS64496;", "2001:db8::/120 AS64496;"]
    );
}

#[test]
fn an_overlapping_or_unsorted_range_is_refused_with_both_lines() {
    let overlap = [
        "192.0.2.0\t192.0.2.255\t64496\tZZ\tA",
        "2001:db8::\t2001:db8::ff\t64496\tZZ\tA",
        "192.0.2.128\t192.0.3.255\t64497\tZZ\tB",
    ];
    let err = convert(Keep::Both, &overlap).unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(
        err.to_string(),
        "line 3: the range starting at 192.0.2.128 is not after the range of line 1: \
         the table must be sorted, without overlaps"
    );
    let unsorted = [
        "203.0.113.0\t203.0.113.255\t64497\tZZ\tB",
        "192.0.2.0\t192.0.2.255\t64496\tZZ\tA",
    ];
    assert_eq!(convert(Keep::V6, &unsorted).unwrap_err().line, 2);
}

#[test]
fn a_malformed_line_is_reported_with_its_number() {
    let lines = [TABLE[1], TABLE[2], "192.0.2.x\t192.0.3.0\t1\tZZ\tA"];
    let err = convert(Keep::Both, &lines).unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(
        err.to_string(),
        "line 3: \"192.0.2.x\" is not an IPv4 or IPv6 address"
    );
}

#[test]
fn counts_are_of_ranges_read_and_unrouted() {
    let mut c = Converter::new(Keep::V4);
    for (i, l) in TABLE.iter().enumerate() {
        c.add_line(i + 1, l).unwrap();
    }
    assert_eq!(c.counts(), (7, 3));
}

#[test]
fn counts_are_written_singular_for_one() {
    assert_eq!(counted(0, "network"), "0 networks");
    assert_eq!(counted(1, "network"), "1 network");
    assert_eq!(counted(2, "range"), "2 ranges");
    let mut one = Converter::new(Keep::default());
    one.add_line(1, "192.0.2.0\t192.0.2.255\t64496\tZZ\tEXAMPLE")
        .unwrap();
    assert_eq!(
        summary(1, one.counts()),
        "1 network from 1 range; 0 unrouted (AS 0) left out"
    );
}
