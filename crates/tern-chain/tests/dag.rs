//! The DAG language: what parses into which nodes and edges, what does not and where, cycles
//! printed as cycles, and (property tests) random graphs written out and read back.

use proptest::prelude::*;
use tern_chain::dag::{MAX_EDGES, MAX_NAME, MAX_NODES, MAX_SOURCE, ParseError, Pos, parse};

fn edges(src: &str) -> Vec<(String, String)> {
    let d = parse(src).unwrap();
    d.edges().iter().map(|&(a, b)| (d.nodes()[a].clone(), d.nodes()[b].clone())).collect()
}

fn e(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn groups_join_every_node_to_every_node() {
    assert_eq!(
        edges("nat -> fw -> {aes, lb} -> kv"),
        [e("nat", "fw"), e("fw", "aes"), e("fw", "lb"), e("aes", "kv"), e("lb", "kv")]
    );
    assert_eq!(edges("{a, b} -> {c, d}"), [e("a", "c"), e("a", "d"), e("b", "c"), e("b", "d")]);
    // Statements by `;` or lines, comments, a trailing comma, newlines inside braces; an edge
    // written twice is one.
    let src = "# a diamond\nnt1 -> nt2 -> nt4 # the top path\nnt1 -> nt3; nt3 -> nt4\nnt1 -> {\n  nt2,\n  nt3,\n}";
    assert_eq!(edges(src), [e("nt1", "nt2"), e("nt2", "nt4"), e("nt1", "nt3"), e("nt3", "nt4")]);
    let d = parse(src).unwrap();
    assert_eq!((d.names(&d.entries()), d.names(&d.exits())), (vec!["nt1"], vec!["nt4"]));
    assert_eq!(d.position(d.index("nt3").unwrap()), Pos { line: 3, col: 8 });
    // A single task is a DAG.
    assert_eq!(parse("kv").unwrap().nodes(), ["kv"]);
}

#[test]
fn what_is_not_a_dag_is_named_with_its_place() {
    for (src, says) in [
        ("a -> -> b", "line 1, column 6: expected a name or `{`, found `->`"),
        ("a -> b\n  -> c", "line 2, column 3: expected a name or `{`, found `->`"),
        ("a b", "line 1, column 3: expected `->`, `;` or the end of the line, found `b`"),
        ("a -> {b c}", "line 1, column 9: expected `,` or `}`, found `c`"),
        ("a -> {}", "line 1, column 7: expected a name, found `}`"),
        ("a -> {b,", "line 1, column 9: expected a name, found the end of the text"),
        ("a -> b!", "line 1, column 7: expected a name, `{`, `}`, `,`, `->` or `;`, found `!`"),
        ("a - b", "line 1, column 3: expected a name, `{`, `}`, `,`, `->` or `;`, found `-`"),
        ("a ->", "line 1, column 5: expected a name or `{`, found the end of the text"),
        ("\u{e9}t\u{e9} -> b", "line 1, column 1: expected a name, `{`, `}`, `,`, `->` or `;`, found `\\u{e9}`"),
        ("", "no network task in the DAG"),
        ("# only a comment\n;;", "no network task in the DAG"),
    ] {
        assert_eq!(parse(src).unwrap_err().to_string(), says, "{src:?}");
    }
    let long = "x".repeat(MAX_NAME + 1);
    assert_eq!(parse(&long).unwrap_err(), ParseError::LongName { pos: Pos { line: 1, col: 1 }, len: MAX_NAME + 1 });
    assert!(parse(&"x".repeat(MAX_NAME)).is_ok());
}

#[test]
fn limits_hold() {
    let big = "a;".repeat(MAX_SOURCE / 2 + 1);
    assert_eq!(parse(&big).unwrap_err(), ParseError::TooLarge { what: "bytes of DAG text", limit: MAX_SOURCE });
    let many: String = (0..=MAX_NODES).map(|i| format!("n{i};")).collect();
    assert_eq!(parse(&many).unwrap_err(), ParseError::TooLarge { what: "network tasks", limit: MAX_NODES });
    let ok: String = (0..MAX_NODES).map(|i| format!("n{i};")).collect();
    assert_eq!(parse(&ok).unwrap().nodes().len(), MAX_NODES);
    // 65 x 65 edges in one arrow.
    let group = |p: &str| format!("{{{}}}", (0..65).map(|i| format!("{p}{i}")).collect::<Vec<_>>().join(","));
    let dense = format!("{} -> {}", group("a"), group("b"));
    assert_eq!(parse(&dense).unwrap_err(), ParseError::TooLarge { what: "edges", limit: MAX_EDGES });
}

#[test]
fn cycles_are_printed_as_cycles() {
    for (src, says) in [
        ("a -> a", "a cycle: a -> a"),
        ("a -> b -> c; c -> a", "a cycle: a -> b -> c -> a"),
        ("x -> a -> {b, c}; c -> d -> a; b -> y", "a cycle: a -> c -> d -> a"),
        ("in -> p -> q -> p", "a cycle: p -> q -> p"),
    ] {
        assert_eq!(parse(src).unwrap().topological().unwrap_err().to_string(), says, "{src}");
    }
}

/// A random graph on `n` nodes: edges (i, j) for the chosen pairs, forward in the permutation
/// `perm` (a DAG), and optionally one edge backwards (a cycle).
/// Node count, a permutation of the nodes, node pairs, and perhaps one more pair.
type Graph = (usize, Vec<usize>, Vec<(usize, usize)>, Option<(usize, usize)>);

fn graph() -> impl Strategy<Value = Graph> {
    (2usize..12).prop_flat_map(|n| {
        (
            Just(n),
            Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            proptest::collection::vec((0..n, 0..n), 0..30),
            proptest::option::of((0..n, 0..n)),
        )
    })
}

/// Writes the edges as arrow statements (grouping some into braces), one node per statement
/// too so that every node appears.
fn write(n: usize, edges: &[(usize, usize)]) -> String {
    let mut s: String = (0..n).map(|i| format!("t{i}\n")).collect();
    for (k, &(a, b)) in edges.iter().enumerate() {
        if k % 3 == 0 {
            s += &format!("{{t{a}}} -> t{b}; ");
        } else {
            s += &format!("t{a} -> t{b}\n");
        }
    }
    s
}

proptest! {
    /// Forward edges make a DAG: it parses to exactly those edges, and the topological order
    /// puts every edge forward. A backward edge makes a cycle: the cycle printed is a real one.
    #[test]
    fn random_graphs_read_back((n, perm, pairs, back) in graph()) {
        let rank = |i: usize| perm.iter().position(|&p| p == i).unwrap();
        let mut fwd: Vec<(usize, usize)> = pairs
            .iter()
            .filter(|(a, b)| rank(*a) < rank(*b))
            .copied()
            .collect();
        let mut uniq = Vec::new();
        for e in fwd.drain(..) {
            if !uniq.contains(&e) {
                uniq.push(e);
            }
        }
        let d = parse(&write(n, &uniq)).unwrap();
        let name = |i: usize| format!("t{i}");
        let got: Vec<(String, String)> =
            d.edges().iter().map(|&(a, b)| (d.nodes()[a].clone(), d.nodes()[b].clone())).collect();
        let want: Vec<(String, String)> = uniq.iter().map(|&(a, b)| (name(a), name(b))).collect();
        prop_assert_eq!(got, want);
        let order = d.topological().unwrap();
        prop_assert_eq!(order.len(), n);
        let pos = |i: usize| order.iter().position(|&o| o == i).unwrap();
        for (a, b) in d.edges() {
            prop_assert!(pos(a) < pos(b));
        }
        // With an edge backwards (or a self-loop), a cycle whose every step is an edge.
        if let Some((a, b)) = back {
            let (a, b) = if rank(a) >= rank(b) { (a, b) } else { (b, a) };
            let mut with = uniq.clone();
            with.push((a, b));
            // a -> b goes back; it closes a cycle only if b reaches a forward.
            let d = parse(&write(n, &with)).unwrap();
            if let Err(c) = d.topological() {
                prop_assert!(c.0.len() >= 2 && c.0.first() == c.0.last());
                for w in c.0.windows(2) {
                    let (x, y) = (d.index(&w[0]).unwrap(), d.index(&w[1]).unwrap());
                    prop_assert!(d.edges().contains(&(x, y)), "{} -> {} is not an edge", w[0], w[1]);
                }
            } else {
                // No cycle: then b does not reach a (and a != b).
                prop_assert!(a != b);
            }
        }
    }

    /// Any text: an error or a DAG, never a panic.
    #[test]
    fn any_text_parses_or_is_refused(s in "[a-c{},;>\\- \n#_]{0,64}") {
        if let Ok(d) = parse(&s) {
            let _ = d.topological();
        }
    }
}
