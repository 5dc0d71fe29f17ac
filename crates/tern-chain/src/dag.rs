//! The DAG language (docs/chain.md, "DAGs"): a tenant writes the network tasks a packet runs
//! through as Click-like arrow statements.
//!
//! ```text
//! dag        := statement (( ';' | newline ) statement)*
//! statement  := (group ('->' group)*)?
//! group      := name | '{' name (',' name)* ','? '}'
//! name       := [A-Za-z_][A-Za-z0-9_]*          (at most 64 bytes)
//! comment    := '#' to the end of the line
//! ```
//!
//! Each `->` joins every node of the group on its left to every node of the group on its
//! right: `nat -> fw -> {aes, lb} -> kv` has the edges nat→fw, fw→aes, fw→lb, aes→kv and lb→kv.
//! A node is named once however often it appears; an edge written twice is one edge. Parsing
//! takes untrusted text: it never panics, and refuses more than [`MAX_SOURCE`] bytes,
//! [`MAX_NODES`] nodes or [`MAX_EDGES`] edges.
//!
//! ```
//! let dag = tern_chain::dag::parse("nat -> fw -> {aes, lb} -> kv").unwrap();
//! assert_eq!(dag.nodes(), ["nat", "fw", "aes", "lb", "kv"]);
//! assert_eq!(dag.edges().len(), 5);
//! assert_eq!(dag.names(&dag.topological().unwrap()), ["nat", "fw", "aes", "lb", "kv"]);
//! let e = tern_chain::dag::parse("a -> b -> c; c -> a").unwrap().topological().unwrap_err();
//! assert_eq!(e.to_string(), "a cycle: a -> b -> c -> a");
//! ```

use std::collections::HashMap;
use std::fmt;

/// The most bytes of DAG text parsed.
pub const MAX_SOURCE: usize = 64 * 1024;
/// The most nodes a DAG may have.
pub const MAX_NODES: usize = 256;
/// The most edges a DAG may have.
pub const MAX_EDGES: usize = 4096;
/// The longest name.
pub const MAX_NAME: usize = 64;

/// Where in the text: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.col)
    }
}

/// Text that is not a DAG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not the grammar: what was expected and what was found, where.
    #[error("{pos}: expected {expected}, found {found}")]
    Syntax {
        /// Where.
        pos: Pos,
        /// What would have been right.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A name longer than [`MAX_NAME`].
    #[error("{pos}: a name of {len} bytes (at most {MAX_NAME})")]
    LongName {
        /// Where it starts.
        pos: Pos,
        /// Its length.
        len: usize,
    },
    /// Past one of the limits.
    #[error("{what}: more than {limit}")]
    TooLarge {
        /// Which: bytes, nodes or edges.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// No node at all.
    #[error("no network task in the DAG")]
    Empty,
}

/// A cycle, the nodes along it (the first repeated at the end when printed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a cycle: {}", .0.join(" -> "))]
pub struct Cycle(pub Vec<String>);

/// A parsed DAG (cycles are found by [`Dag::topological`]): nodes in order of first
/// appearance, edges in order written, each once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dag {
    nodes: Vec<String>,
    /// Where each node first appears.
    at: Vec<Pos>,
    edges: Vec<(u16, u16)>,
}

impl Dag {
    /// Node names, by index.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Where node `i` first appears.
    pub fn position(&self, i: usize) -> Pos {
        self.at.get(i).copied().unwrap_or_default()
    }

    /// The index of node `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n == name)
    }

    /// Edges (from, to) by node index, each once, in the order written.
    pub fn edges(&self) -> Vec<(usize, usize)> {
        self.edges.iter().map(|&(a, b)| (usize::from(a), usize::from(b))).collect()
    }

    /// The nodes an edge leads to from `i`.
    pub fn successors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges.iter().filter(move |e| usize::from(e.0) == i).map(|e| usize::from(e.1))
    }

    /// Nodes no edge leads to (where packets enter).
    pub fn entries(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| !self.edges.iter().any(|e| usize::from(e.1) == i)).collect()
    }

    /// Nodes no edge leaves (where packets leave).
    pub fn exits(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| !self.edges.iter().any(|e| usize::from(e.0) == i)).collect()
    }

    /// The names of `indices`.
    pub fn names(&self, indices: &[usize]) -> Vec<&str> {
        indices.iter().filter_map(|&i| self.nodes.get(i).map(String::as_str)).collect()
    }

    /// The nodes in an order every edge goes forward in (among those free to go next, the
    /// first written first); a cycle if there is one.
    pub fn topological(&self) -> Result<Vec<usize>, Cycle> {
        let n = self.nodes.len();
        let mut indegree = vec![0usize; n];
        for &(_, b) in &self.edges {
            indegree[usize::from(b)] += 1;
        }
        let mut order = Vec::with_capacity(n);
        let mut done = vec![false; n];
        while order.len() < n {
            let Some(next) = (0..n).find(|&i| !done[i] && indegree[i] == 0) else {
                return Err(self.cycle(&done));
            };
            done[next] = true;
            order.push(next);
            for s in self.successors(next) {
                indegree[s] -= 1;
            }
        }
        Ok(order)
    }

    /// A cycle among the nodes not `done`. Each of them has an edge in from another of them
    /// (else it would be free to go next), so walking edges backwards from one must come round;
    /// the cycle is printed forwards, from its first-written node.
    fn cycle(&self, done: &[bool]) -> Cycle {
        let start = done.iter().position(|d| !d).unwrap_or(0);
        let mut seen: HashMap<usize, usize> = HashMap::new();
        let mut path = vec![start];
        let mut at = start;
        loop {
            seen.insert(at, path.len() - 1);
            let prev = self.edges.iter().find(|e| usize::from(e.1) == at && !done[usize::from(e.0)]);
            let Some(&(p, _)) = prev else { return Cycle(vec![self.nodes[start].clone()]) };
            let p = usize::from(p);
            if let Some(&i) = seen.get(&p) {
                // path[i..] walks the cycle backwards: reverse it, start at its lowest index.
                let mut ring: Vec<usize> = path[i..].to_vec();
                ring.reverse();
                let first = ring.iter().enumerate().min_by_key(|(_, k)| **k).map_or(0, |(j, _)| j);
                ring.rotate_left(first);
                let mut names: Vec<String> = ring.iter().map(|&k| self.nodes[k].clone()).collect();
                names.push(names[0].clone());
                return Cycle(names);
            }
            path.push(p);
            at = p;
        }
    }
}

/// Tokens of the language.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Name(&'a str),
    Arrow,
    Open,
    Close,
    Comma,
    /// `;` or a newline.
    End,
    Eof,
}

fn describe(t: &Tok<'_>) -> String {
    match t {
        Tok::Name(n) => format!("`{n}`"),
        Tok::Arrow => "`->`".into(),
        Tok::Open => "`{`".into(),
        Tok::Close => "`}`".into(),
        Tok::Comma => "`,`".into(),
        Tok::End => "the end of the statement".into(),
        Tok::Eof => "the end of the text".into(),
    }
}

struct Lexer<'a> {
    src: &'a str,
    i: usize,
    pos: Pos,
}

impl<'a> Lexer<'a> {
    fn bump(&mut self, c: char) {
        self.i += c.len_utf8();
        if c == '\n' {
            self.pos = Pos { line: self.pos.line.saturating_add(1), col: 1 };
        } else {
            self.pos.col = self.pos.col.saturating_add(1);
        }
    }

    /// The next token and where it starts.
    fn next(&mut self) -> Result<(Tok<'a>, Pos), ParseError> {
        loop {
            let Some(c) = self.src[self.i..].chars().next() else { return Ok((Tok::Eof, self.pos)) };
            match c {
                '#' => {
                    while let Some(c) = self.src[self.i..].chars().next() {
                        if c == '\n' {
                            break;
                        }
                        self.bump(c);
                    }
                }
                '\n' | ';' => {
                    let at = self.pos;
                    self.bump(c);
                    return Ok((Tok::End, at));
                }
                c if c.is_whitespace() => self.bump(c),
                _ => break,
            }
        }
        let at = self.pos;
        let rest = &self.src[self.i..];
        let c = rest.chars().next().unwrap_or(' ');
        let single = |t| Ok((t, at));
        match c {
            '{' => {
                self.bump(c);
                single(Tok::Open)
            }
            '}' => {
                self.bump(c);
                single(Tok::Close)
            }
            ',' => {
                self.bump(c);
                single(Tok::Comma)
            }
            '-' if rest.starts_with("->") => {
                self.bump('-');
                self.bump('>');
                single(Tok::Arrow)
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                if len > MAX_NAME {
                    return Err(ParseError::LongName { pos: at, len });
                }
                let name = &rest[..len];
                for c in name.chars() {
                    self.bump(c);
                }
                single(Tok::Name(name))
            }
            other => Err(ParseError::Syntax {
                pos: at,
                expected: "a name, `{`, `}`, `,`, `->` or `;`",
                found: format!("`{}`", other.escape_default()),
            }),
        }
    }
}

/// Parses DAG text (docs/chain.md's grammar, above).
pub fn parse(src: &str) -> Result<Dag, ParseError> {
    if src.len() > MAX_SOURCE {
        return Err(ParseError::TooLarge { what: "bytes of DAG text", limit: MAX_SOURCE });
    }
    let mut lx = Lexer { src, i: 0, pos: Pos { line: 1, col: 1 } };
    let mut dag = Dag::default();
    let mut ids: HashMap<&str, u16> = HashMap::new();
    let mut tok = lx.next()?;
    // One statement at a time.
    loop {
        match tok.0 {
            Tok::Eof => break,
            Tok::End => {
                tok = lx.next()?;
                continue;
            }
            _ => {}
        }
        let mut prev: Option<Vec<u16>> = None;
        loop {
            // A group.
            let mut group = Vec::new();
            match tok.0 {
                Tok::Name(n) => {
                    group.push(node(&mut dag, &mut ids, n, tok.1)?);
                    tok = lx.next()?;
                }
                Tok::Open => {
                    tok = lx.next()?;
                    // Newlines inside braces are spaces.
                    while tok.0 == Tok::End {
                        tok = lx.next()?;
                    }
                    loop {
                        let Tok::Name(n) = tok.0 else {
                            return Err(ParseError::Syntax { pos: tok.1, expected: "a name", found: describe(&tok.0) });
                        };
                        group.push(node(&mut dag, &mut ids, n, tok.1)?);
                        tok = lx.next()?;
                        while tok.0 == Tok::End {
                            tok = lx.next()?;
                        }
                        match tok.0 {
                            Tok::Comma => {
                                tok = lx.next()?;
                                while tok.0 == Tok::End {
                                    tok = lx.next()?;
                                }
                                if tok.0 == Tok::Close {
                                    tok = lx.next()?;
                                    break;
                                }
                            }
                            Tok::Close => {
                                tok = lx.next()?;
                                break;
                            }
                            _ => {
                                return Err(ParseError::Syntax {
                                    pos: tok.1,
                                    expected: "`,` or `}`",
                                    found: describe(&tok.0),
                                });
                            }
                        }
                    }
                }
                _ => {
                    return Err(ParseError::Syntax { pos: tok.1, expected: "a name or `{`", found: describe(&tok.0) });
                }
            }
            if let Some(from) = prev.take() {
                for &a in &from {
                    for &b in &group {
                        if !dag.edges.contains(&(a, b)) {
                            if dag.edges.len() == MAX_EDGES {
                                return Err(ParseError::TooLarge { what: "edges", limit: MAX_EDGES });
                            }
                            dag.edges.push((a, b));
                        }
                    }
                }
            }
            match tok.0 {
                Tok::Arrow => {
                    tok = lx.next()?;
                    prev = Some(group);
                }
                Tok::End | Tok::Eof => break,
                _ => {
                    return Err(ParseError::Syntax {
                        pos: tok.1,
                        expected: "`->`, `;` or the end of the line",
                        found: describe(&tok.0),
                    });
                }
            }
        }
    }
    if dag.nodes.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(dag)
}

/// The index of node `name`, added if new.
fn node<'a>(dag: &mut Dag, ids: &mut HashMap<&'a str, u16>, name: &'a str, at: Pos) -> Result<u16, ParseError> {
    if let Some(&i) = ids.get(name) {
        return Ok(i);
    }
    if dag.nodes.len() == MAX_NODES {
        return Err(ParseError::TooLarge { what: "network tasks", limit: MAX_NODES });
    }
    let i = dag.nodes.len() as u16;
    ids.insert(name, i);
    dag.nodes.push(name.to_string());
    dag.at.push(at);
    Ok(i)
}
