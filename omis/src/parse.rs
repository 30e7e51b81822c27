//! The OMIS request and reply parser (OMIS 1.0 section 7): a hand-written recursive descent
//! over the text, with errors that name the line, column and problem.
//!
//! Accepted beyond the grammar's letter: the fields of a basic request or reply may be
//! separated by commas (the grammar: `1, [], stop([])`) or by whitespace only (every example
//! in the spec: `1 [] stop([])`); node lists take ranges (`[0-1023]`, `[0-3,7,$0]`); numbers
//! take C forms (`0x1F`, `-2e3`, `.5`, `1.`, `inf`, `nan`); strings take C escapes. A
//! failed reply names its failure's kind after the service: `3 [0-3] stop!no_process("…")`.

use std::str::FromStr;

use sdm_proto::IdSet;

use super::ast::{ActionList, BasicReply, BasicRequest, Nodes, Reply, Request, Value};
use super::status::{ErrorKind, UnknownKind};

mod scalar;

/// The fields of a basic request or reply: id, nodes, service, failure (replies), values.
type Basic = (i64, Nodes, String, Option<ErrorKind>, Vec<Value>);

/// Lists nested deeper than this are refused (keeps the recursion off the stack's edge).
const MAX_DEPTH: usize = 64;

/// Why a request, reply or value was refused, and where.
///
/// Displays as `column 14: expected ',' or ')' after parameter 1 of 'stop', found ';'`
/// (with `line L, ` in front when the problem is past the first line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {problem}", location(*.line, *.column))]
pub struct ParseError {
    /// Byte offset of the problem in the text.
    pub offset: usize,
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column (in characters) of the problem.
    pub column: usize,
    /// What is wrong, e.g. `unterminated string: no closing '"' before the end of input`.
    pub problem: String,
}

/// `column C` on the first line, `line L, column C` after it.
fn location(line: usize, column: usize) -> String {
    if line == 1 {
        format!("column {column}")
    } else {
        format!("line {line}, column {column}")
    }
}

type Result<T> = std::result::Result<T, ParseError>;

/// Parses a (possibly composite) request: `[event ':'] action_list`, e.g.
/// `15 [1] user_event(5): 16 [1] print([$1]); 17 [1] stop($1)`. Leading and trailing
/// whitespace is allowed; anything else after the last action is an error.
pub fn parse_request(text: &str) -> Result<Request> {
    let mut p = Parser::new(text);
    p.ws();
    if p.peek().is_none() {
        return Err(p.err(p.pos, "empty request: expected a request id (an integer)"));
    }
    let first = p.basic_request("a request")?;
    p.ws();
    let (event, first_action) = if p.eat(b':') {
        (
            Some(first),
            p.basic_request("an action after the event's ':'")?,
        )
    } else {
        (None, first)
    };
    let mut actions = vec![first_action];
    let mut sep = None;
    loop {
        p.ws();
        let at = p.pos;
        match p.peek() {
            None => break,
            Some(c @ (b',' | b';')) => {
                if sep.is_some_and(|s| s != c) {
                    return Err(p.err(
                        at,
                        "cannot mix ',' (parallel) and ';' (sequential) in one action list",
                    ));
                }
                sep = Some(c);
                p.pos += 1;
                let what = if c == b',' {
                    "an action after ','"
                } else {
                    "an action after ';'"
                };
                actions.push(p.basic_request(what)?);
            }
            Some(b':') if event.is_some() => {
                return Err(p.err(at, "a request has only one event: unexpected second ':'"));
            }
            Some(b':') => {
                return Err(p.err(
                    at,
                    "unexpected ':': only the first basic request of a request can be the event",
                ));
            }
            Some(_) => {
                return Err(p.err(
                    at,
                    format!(
                        "unexpected {} after the request (actions are separated by ',' or ';')",
                        p.found(at)
                    ),
                ));
            }
        }
    }
    let actions = if sep == Some(b';') {
        ActionList::Seq(actions)
    } else {
        ActionList::Par(actions)
    };
    Ok(Request { event, actions })
}

/// Parses a reply: basic replies separated by `;`, e.g. `16 [2] print(1234); 17 [2] stop(0)`.
pub fn parse_reply(text: &str) -> Result<Reply> {
    let mut p = Parser::new(text);
    p.ws();
    if p.peek().is_none() {
        return Err(p.err(p.pos, "empty reply: expected a request id (an integer)"));
    }
    let mut replies = vec![p.basic_reply("a reply")?];
    loop {
        p.ws();
        let at = p.pos;
        match p.peek() {
            None => break,
            Some(b';') => {
                p.pos += 1;
                replies.push(p.basic_reply("a basic reply after ';'")?);
            }
            Some(_) => {
                return Err(p.err(
                    at,
                    format!(
                        "unexpected {} after the reply (basic replies are separated by ';')",
                        p.found(at)
                    ),
                ));
            }
        }
    }
    Ok(Reply(replies))
}

/// Runs `f` over the whole of `text` (whitespace allowed around it), refusing leftovers.
fn whole<T>(text: &str, what: &str, f: impl FnOnce(&mut Parser<'_>) -> Result<T>) -> Result<T> {
    let mut p = Parser::new(text);
    p.ws();
    let v = f(&mut p)?;
    p.ws();
    match p.peek() {
        None => Ok(v),
        Some(_) => Err(p.err(p.pos, format!("unexpected {} after {what}", p.found(p.pos)))),
    }
}

impl FromStr for Request {
    type Err = ParseError;

    /// Same as [`parse_request`].
    fn from_str(s: &str) -> Result<Self> {
        parse_request(s)
    }
}

impl FromStr for Reply {
    type Err = ParseError;

    /// Same as [`parse_reply`].
    fn from_str(s: &str) -> Result<Self> {
        parse_reply(s)
    }
}

impl FromStr for BasicRequest {
    type Err = ParseError;

    /// One basic request, e.g. `19 [$0] stop($1)`.
    fn from_str(s: &str) -> Result<Self> {
        whole(s, "the basic request", |p| {
            p.basic_request("a basic request")
        })
    }
}

impl FromStr for BasicReply {
    type Err = ParseError;

    /// One basic reply, e.g. `1 [0-1023] stop(0)`.
    fn from_str(s: &str) -> Result<Self> {
        whole(s, "the basic reply", |p| p.basic_reply("a basic reply"))
    }
}

impl FromStr for Value {
    type Err = ParseError;

    /// One value, e.g. `[1,[2,"a"],3.0]`.
    fn from_str(s: &str) -> Result<Self> {
        whole(s, "the value", |p| p.value(0))
    }
}

impl FromStr for Nodes {
    type Err = ParseError;

    /// One receiver node list, e.g. `[]` or `[0-3,7,$0]`.
    fn from_str(s: &str) -> Result<Self> {
        whole(s, "the node list", |p| {
            if p.peek() == Some(b'[') {
                p.nodes(true)
            } else {
                Err(p.err(p.pos, format!("expected '[', found {}", p.found(p.pos))))
            }
        })
    }
}

/// The parser state: the text and a byte position in it (always on a char boundary).
struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Self {
            src,
            b: src.as_bytes(),
            pos: 0,
        }
    }

    /// An error at byte `at`, with its line and column worked out.
    fn err(&self, at: usize, problem: impl Into<String>) -> ParseError {
        let at = at.min(self.src.len());
        let before = self.src.get(..at).unwrap_or(self.src);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        ParseError {
            offset: at,
            line: 1 + before.matches('\n').count(),
            column: 1 + before[line_start..].chars().count(),
            problem: problem.into(),
        }
    }

    /// What sits at byte `at`, for error messages: `end of input`, `';'`, `'foo'`, `a string`.
    fn found(&self, at: usize) -> String {
        let rest = self.src.get(at..).unwrap_or("");
        let mut chars = rest.chars();
        let Some(c) = chars.next() else {
            return "end of input".into();
        };
        if c == '"' {
            return "a string".into();
        }
        let wordy = |ch: char| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.';
        let starts_word =
            wordy(c) || (matches!(c, '-' | '+' | '$') && chars.next().is_some_and(wordy));
        if !starts_word {
            return format!("'{c}'");
        }
        let len = c.len_utf8()
            + rest[c.len_utf8()..]
                .find(|ch| !wordy(ch))
                .unwrap_or(rest.len() - 1);
        let word = &rest[..len];
        match word.char_indices().nth(24) {
            Some((cut, _)) => format!("'{}...'", &word[..cut]),
            None => format!("'{word}'"),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.b.get(self.pos + ahead).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Skips whitespace (spaces, tabs, line breaks).
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// `request_id [','] nodes [','] service '(' params ')'`.
    fn basic_request(&mut self, what: &str) -> Result<BasicRequest> {
        let (id, nodes, service, _, params) = self.basic(what, true)?;
        Ok(BasicRequest {
            id,
            nodes,
            service,
            params,
        })
    }

    /// `request_id [','] sender_nodes [','] service '(' results ')'`.
    fn basic_reply(&mut self, what: &str) -> Result<BasicReply> {
        let (id, nodes, service, failure, results) = self.basic(what, false)?;
        Ok(BasicReply {
            id,
            senders: nodes.ids,
            service,
            results,
            failure,
        })
    }

    /// The shared shape of basic requests and replies (a reply's service name may be
    /// followed by `!kind`, its failure).
    fn basic(&mut self, what: &str, refs: bool) -> Result<Basic> {
        self.ws();
        let at = self.pos;
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || c == b'-' || c == b'+')
        {
            return Err(self.err(
                at,
                format!(
                    "expected {what}, starting with a request id (an integer), found {}",
                    self.found(at)
                ),
            ));
        }
        let id = match self.number()? {
            Value::Int(i) => i,
            _ => {
                return Err(self.err(
                    at,
                    format!("request id must be an integer, found {}", self.found(at)),
                ));
            }
        };
        self.ws();
        if self.eat(b',') {
            self.ws();
        }
        if self.peek() != Some(b'[') {
            let which = if refs { "receiver" } else { "sender" };
            return Err(self.err(
                self.pos,
                format!(
                    "expected '[' opening the {which} node list after request id {id}, found {}",
                    self.found(self.pos)
                ),
            ));
        }
        let nodes = self.nodes(refs)?;
        self.ws();
        if self.eat(b',') {
            self.ws();
        }
        let Some(service) = self.ident() else {
            return Err(self.err(
                self.pos,
                format!(
                    "expected a service name after the node list, found {}",
                    self.found(self.pos)
                ),
            ));
        };
        let failure = if !refs && self.peek() == Some(b'!') {
            Some(self.failure_kind(&service)?)
        } else {
            None
        };
        self.ws();
        if !self.eat(b'(') {
            return Err(self.err(
                self.pos,
                format!(
                    "expected '(' after service name '{service}', found {}",
                    self.found(self.pos)
                ),
            ));
        }
        let params = self.params(&service)?;
        Ok((id, nodes, service, failure, params))
    }

    /// The `!kind` after a failed reply's service name.
    fn failure_kind(&mut self, service: &str) -> Result<ErrorKind> {
        self.pos += 1;
        let at = self.pos;
        let Some(name) = self.ident() else {
            return Err(self.err(
                at,
                format!(
                    "expected a failure kind after '{service}!', found {}",
                    self.found(at)
                ),
            ));
        };
        name.parse()
            .map_err(|e: UnknownKind| self.err(at, e.to_string()))
    }

    /// A C identifier, if one starts here.
    fn ident(&mut self) -> Option<String> {
        if !self.peek().is_some_and(is_ident_start) {
            return None;
        }
        let start = self.pos;
        while self.peek().is_some_and(is_ident) {
            self.pos += 1;
        }
        Some(self.src[start..self.pos].to_owned())
    }

    /// The parameters after `service(`, through the closing `)`.
    fn params(&mut self, service: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        self.ws();
        if self.eat(b')') {
            return Ok(out);
        }
        loop {
            self.ws();
            out.push(self.value(0)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {
                    self.pos += 1;
                    return Ok(out);
                }
                _ => {
                    return Err(self.err(
                        self.pos,
                        format!(
                            "expected ',' or ')' after parameter {} of '{service}', found {}",
                            out.len(),
                            self.found(self.pos)
                        ),
                    ));
                }
            }
        }
    }

    /// One value: integer, float, string, list or `$n`.
    fn value(&mut self, depth: usize) -> Result<Value> {
        let at = self.pos;
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'[') => self.list(depth + 1),
            Some(b'$') => self.reference().map(Value::Ref),
            Some(c) if c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.') => self.number(),
            Some(c) if is_ident_start(c) && self.special_float().is_some() => self.number(),
            Some(c) if is_ident_start(c) => Err(self.err(
                at,
                format!(
                    "expected a value (integer, float, string, list or $n), found {} \
                     (strings must be quoted)",
                    self.found(at)
                ),
            )),
            _ => Err(self.err(
                at,
                format!(
                    "expected a value (integer, float, string, list or $n), found {}",
                    self.found(at)
                ),
            )),
        }
    }

    /// A list: `'[' [value (',' value)*] ']'`.
    fn list(&mut self, depth: usize) -> Result<Value> {
        let open = self.pos;
        if depth > MAX_DEPTH {
            return Err(self.err(open, format!("lists nested more than {MAX_DEPTH} deep")));
        }
        self.pos += 1;
        let mut out = Vec::new();
        self.ws();
        if self.eat(b']') {
            return Ok(Value::List(out));
        }
        loop {
            self.ws();
            out.push(self.value(depth)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::List(out));
                }
                _ => {
                    let opened = self.err(open, "");
                    return Err(self.err(
                        self.pos,
                        format!(
                            "expected ',' or ']' after element {} of the list opened at {}, \
                             found {}",
                            out.len(),
                            location(opened.line, opened.column),
                            self.found(self.pos)
                        ),
                    ));
                }
            }
        }
    }

    /// `$n`, the `$` under the cursor.
    fn reference(&mut self) -> Result<u32> {
        let at = self.pos;
        self.pos += 1;
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(
                at,
                format!("expected a number after '$', found {}", self.found(start)),
            ));
        }
        self.check_number_end(at)?;
        self.src[start..self.pos].parse().map_err(|_| {
            self.err(
                at,
                format!(
                    "${} is too large (at most $4294967295)",
                    &self.src[start..self.pos]
                ),
            )
        })
    }

    /// A node number: unsigned, decimal or `0x` hex, at most 32 bits.
    fn node_number(&mut self) -> Result<u32> {
        let start = self.pos;
        let (digits, radix) =
            if self.peek() == Some(b'0') && matches!(self.peek_at(1), Some(b'x' | b'X')) {
                self.pos += 2;
                (self.pos, 16)
            } else {
                (self.pos, 10)
            };
        while self.peek().is_some_and(|c| c.is_ascii_digit())
            || (radix == 16 && self.peek().is_some_and(|c| c.is_ascii_hexdigit()))
        {
            self.pos += 1;
        }
        if digits == self.pos {
            return Err(self.err(
                start,
                format!(
                    "expected hex digits after '0x', found {}",
                    self.found(digits)
                ),
            ));
        }
        self.check_number_end(start)?;
        u32::from_str_radix(&self.src[digits..self.pos], radix).map_err(|_| {
            self.err(
                start,
                format!(
                    "node number {} does not fit in 32 bits",
                    &self.src[start..self.pos]
                ),
            )
        })
    }

    /// A node list, the `[` under the cursor: `[]`, or node numbers, ranges `a-b` and (if
    /// `refs`) `$n` separated by commas.
    fn nodes(&mut self, refs: bool) -> Result<Nodes> {
        self.pos += 1;
        self.ws();
        if self.eat(b']') {
            return Ok(if refs {
                Nodes::all()
            } else {
                Nodes::ids(IdSet::new())
            });
        }
        let mut out = Nodes::ids(IdSet::new());
        loop {
            self.ws();
            let at = self.pos;
            match self.peek() {
                Some(b'$') if !refs => {
                    return Err(self.err(at, "sender nodes must be node numbers, not $-references"));
                }
                Some(b'$') => {
                    out.refs.push(self.reference()?);
                    self.ws();
                    if self.peek() == Some(b'-') {
                        return Err(
                            self.err(self.pos, "a $-reference cannot start a range of nodes")
                        );
                    }
                }
                Some(c) if c.is_ascii_digit() => {
                    let lo = self.node_number()?;
                    self.ws();
                    if self.eat(b'-') {
                        self.ws();
                        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            return Err(self.err(
                                self.pos,
                                format!(
                                    "expected the node number ending the range {lo}-, found {}",
                                    self.found(self.pos)
                                ),
                            ));
                        }
                        let hi = self.node_number()?;
                        if hi < lo {
                            return Err(self.err(
                                at,
                                format!(
                                    "reversed range {lo}-{hi} in the node list (write {hi}-{lo})"
                                ),
                            ));
                        }
                        out.ids.insert_range(lo..=hi);
                    } else {
                        out.ids.insert(lo);
                    }
                }
                _ => {
                    let what = if refs {
                        "a node number, a range or $n"
                    } else {
                        "a node number or a range"
                    };
                    return Err(self.err(
                        at,
                        format!("expected {what} in the node list, found {}", self.found(at)),
                    ));
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(out);
                }
                _ => {
                    return Err(self.err(
                        self.pos,
                        format!(
                            "expected ',' or ']' in the node list, found {}",
                            self.found(self.pos)
                        ),
                    ));
                }
            }
        }
    }
}
