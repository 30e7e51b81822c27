//! Tests of the OMIS module: every request and reply example the spec prints, round trips
//! (fixed and property-based), error positions, big node lists, `unify` and the registry.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use sdm_proto::IdSet;

use super::*;

/// Requests printed in seeds/000_3a9eb63d8b6f887a.txt: (spec line, as printed, as tested).
/// "As tested" differs only where the spec writes a placeholder that is not OMIS syntax
/// (`E1`, `E2`, `A` for an event or action list, `...` for elided results), omits the request
/// id and node list on purpose (footnote 3 of section 8.2.2), or runs several requests
/// together on one line (line 398, an OCR join of three lines).
const SPEC_REQUESTS: &[(u32, &str, &str)] = &[
    // Section 5.3.2: "To stop the task ... simply add" (OCR prints `\$` for `$`).
    (357, r"19 [\$0] stop(\$1)", "19 [$0] stop($1)"),
    // Section 5.5, the `or` operator.
    (
        389,
        "10 [1] define_user_event(5)",
        "10 [1] define_user_event(5)",
    ),
    (
        390,
        "11 [1] E1: 12 [1] raise_event(5, [$1])",
        "11 [1] E1(): 12 [1] raise_event(5, [$1])",
    ),
    (
        391,
        "13 [2] E2: 14 [1] raise_event(5, [$1])",
        "13 [2] E2(): 14 [1] raise_event(5, [$1])",
    ),
    (
        392,
        "15 [1] user_event(5): A($1)",
        "15 [1] user_event(5): 19 [1] A($1)",
    ),
    (
        393,
        "16 [1] enable(11), 17 [2] enable(13), 18 [1] enable(15)",
        "16 [1] enable(11), 17 [2] enable(13), 18 [1] enable(15)",
    ),
    // Section 5.5, "E2 after E1": three requests run together on one line.
    (398, "10 [2] E2: 11 [2] A", "10 [2] E2(): 11 [2] A()"),
    (
        398,
        "12 [1] E1: 13 [2] enable(10)",
        "12 [1] E1(): 13 [2] enable(10)",
    ),
    (398, "14 [1] enable(12)", "14 [1] enable(12)"),
    // Section 8 introduction.
    (
        521,
        "123 [1] process_info([231,345,654], 9)",
        "123 [1] process_info([231,345,654], 9)",
    ),
    (
        550,
        "123 [1] process_info([231,345,654], 9)",
        "123 [1] process_info([231,345,654], 9)",
    ),
    // Section 8.2.2, footnote 3: shown without request ids and node lists.
    (1221, "define_user_event(5)", "1 [1] define_user_event(5)"),
    (
        1222,
        "E1: raise_event(5, [$1])",
        "2 [1] E1(): 3 [1] raise_event(5, [$1])",
    ),
    (
        1223,
        "E2: raise_event(5, [$1])",
        "4 [2] E2(): 5 [1] raise_event(5, [$1])",
    ),
    (
        1224,
        "user_event(5): A($1)",
        "6 [1] user_event(5): 7 [1] A($1)",
    ),
    (1232, "define_user_event(6)", "1 [] define_user_event(6)"),
    (
        1233,
        r#"start_lib_call([12], "pvm_send"): filter($2, 15, 6)"#,
        r#"2 [] start_lib_call([12], "pvm_send"): 3 [] filter($2, 15, 6)"#,
    ),
    (1234, "user_event(6): A()", "4 [] user_event(6): 5 [] A()"),
    // Fragments quoted in the prose (line 355: section 5.3.2; line 702: process_info).
    (355, r"print([\$1])", "16 [2] print([$1])"),
    (355, r"stack_backtrace(\$1)", "17 [2] stack_backtrace($1)"),
    (
        355,
        r"read_int_regs(\$1,0,32)",
        "18 [2] read_int_regs($1,0,32)",
    ),
    (702, "process_info([],0)", "1 [] process_info([],0)"),
];

/// Replies printed in the spec: (spec line, as printed, as tested).
const SPEC_REPLIES: &[(u32, &str, &str)] = &[
    (
        364,
        "16 [2] print(1234); 17 [2] stack_backtrace(...); 18 [2] read_int_regs(...)",
        "16 [2] print(1234); 17 [2] stack_backtrace(0, [[0xfe08,0x7fff0010],[0x1040,0x7fff0040]]); \
         18 [2] read_int_regs(0, [1,2,3])",
    ),
    // Lines 527-528 are one line split for printing (footnote 2, the trailing `\`).
    (
        527,
        "123 [1] process_info(0, [\"foo\",12,0,12.7, \"bar\",1,10,0.65,\\\n\"tst\",9,-10,1.1e3])",
        "123 [1] process_info(0, [\"foo\",12,0,12.7, \"bar\",1,10,0.65,\"tst\",9,-10,1.1e3])",
    ),
    (
        555,
        r#"123 [1] process\_info(0, ["foo",12.7, "bar",0.65, "tst",1.1e3])"#,
        r#"123 [1] process_info(0, ["foo",12.7, "bar",0.65, "tst",1.1e3])"#,
    ),
];

/// The examples of DESIGN.md's payload-protocol paragraph.
const DESIGN_REQUEST: &str = "1 [] stop([])";
const DESIGN_REPLY: &str = "1 [0-1023] stop(0)";

fn req(text: &str) -> Request {
    parse_request(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn reply(text: &str) -> Reply {
    parse_reply(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn req_err(text: &str) -> ParseError {
    match parse_request(text) {
        Ok(r) => panic!("{text:?} parsed as {r:?}"),
        Err(e) => e,
    }
}

fn ids(ranges: &[(u32, u32)]) -> IdSet {
    let mut s = IdSet::new();
    for &(a, b) in ranges {
        s.insert_range(a..=b);
    }
    s
}

#[test]
fn spec_request_examples_parse_and_round_trip() {
    let mut literal = 0;
    for &(line, printed, tested) in SPEC_REQUESTS {
        let r = parse_request(tested).unwrap_or_else(|e| panic!("spec line {line}: {e}"));
        let printed_back = r.to_string();
        assert_eq!(req(&printed_back), r, "spec line {line}");
        if printed == tested {
            literal += 1;
        }
    }
    assert_eq!(SPEC_REQUESTS.len(), 22);
    assert_eq!(literal, 5);
}

#[test]
fn spec_reply_examples_parse_and_round_trip() {
    for &(line, _, tested) in SPEC_REPLIES {
        let r = parse_reply(tested).unwrap_or_else(|e| panic!("spec line {line}: {e}"));
        assert_eq!(reply(&r.to_string()), r, "spec line {line}");
    }
    let r = reply(SPEC_REPLIES[1].2);
    assert_eq!(r.0.len(), 1);
    let Value::List(info) = &r.0[0].results[1] else {
        panic!("{r:?}")
    };
    assert_eq!(info.len(), 12);
    assert_eq!(info[0], Value::Str("foo".into()));
    assert_eq!(info[3], Value::Float(12.7));
    assert_eq!(info[10], Value::Int(-10));
    assert_eq!(info[11], Value::Float(1100.0));
    let r = reply(SPEC_REPLIES[0].2);
    assert_eq!(r.0.iter().map(|b| b.id).collect::<Vec<_>>(), [16, 17, 18]);
    assert!(r.0.iter().all(|b| b.senders == IdSet::single(2)));
}

#[test]
fn spec_placeholders_are_refused_with_a_position() {
    // `E1` stands for an event in the spec; OMIS syntax needs the parentheses.
    let e = req_err(SPEC_REQUESTS[2].1);
    assert_eq!(e.column, 10);
    assert_eq!(e.problem, "expected '(' after service name 'E1', found ':'");
    // The elided results `...` of line 364.
    let e = parse_reply(SPEC_REPLIES[0].1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "column 44: expected a value (integer, float, string, list or $n), found '...'"
    );
    // The printing line break of line 527.
    let e = parse_reply(SPEC_REPLIES[1].1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "column 59: expected a value (integer, float, string, list or $n), found '\\'"
    );
}

#[test]
fn design_examples() {
    let r = req(DESIGN_REQUEST);
    let a = &r.actions.actions()[0];
    assert!(r.event.is_none());
    assert!(a.nodes.all);
    assert_eq!((a.id, a.service.as_str()), (1, "stop"));
    assert_eq!(a.params, [Value::List(vec![])]);
    assert_eq!(r.to_string(), DESIGN_REQUEST);
    let r = reply(DESIGN_REPLY);
    assert_eq!(r.0[0].senders, IdSet::range(0..=1023));
    assert_eq!(r.0[0].results, [Value::Int(0)]);
    assert_eq!(r.to_string(), DESIGN_REPLY);
}

#[test]
fn structure_of_composite_requests() {
    let r = req("16 [1] enable(11), 17 [2] enable(13), 18 [1] enable(15)");
    let ActionList::Par(v) = &r.actions else {
        panic!("{r:?}")
    };
    assert_eq!(v.len(), 3);
    assert_eq!(v[1].nodes, Nodes::ids(IdSet::single(2)));
    let r = req("15 [1] user_event(5): 16 [1] print([$1]); 17 [1] stop($1)");
    let ev = r.event.as_ref().unwrap();
    assert_eq!(ev.service, "user_event");
    let ActionList::Seq(v) = &r.actions else {
        panic!("{r:?}")
    };
    assert_eq!(v[0].params, [Value::List(vec![Value::Ref(1)])]);
    assert_eq!(v[1].params, [Value::Ref(1)]);
    let r = req("19 [$0] stop($1)");
    let a = &r.actions.actions()[0];
    assert_eq!(a.nodes.refs, [0]);
    assert!(!a.nodes.all && a.nodes.ids.is_empty());
    assert!(matches!(r.actions, ActionList::Par(ref v) if v.len() == 1));
}

#[test]
fn canonical_form() {
    // The spec's own examples in canonical form print back unchanged.
    for text in [
        "123 [1] process_info([231,345,654], 9)",
        "16 [1] enable(11), 17 [2] enable(13), 18 [1] enable(15)",
        "11 [1] E1(): 12 [1] raise_event(5, [$1])",
        "19 [$0] stop($1)",
        "1 [0-3,7,$0,$2] f(); 2 [] g(\"a\\\"b\")",
    ] {
        assert_eq!(req(text).to_string(), text);
    }
    assert_eq!(
        reply(SPEC_REPLIES[2].2).to_string(),
        r#"123 [1] process_info(0, ["foo",12.7,"bar",0.65,"tst",1100.0])"#
    );
    // Comma-separated fields (the grammar) and whitespace anywhere read the same.
    let spaced = req("10 [1] define_user_event(5), 11 [2] enable(3)");
    assert_eq!(req("10,[1],define_user_event(5),11,[2],enable(3)"), spaced);
    assert_eq!(
        req(" \n10 ,\t[ 1 ] , define_user_event ( 5 )\n,\n11 [2]enable(3)  \n"),
        spaced
    );
    assert_eq!(
        req("1 [ 0 - 3 , 0x10 , $0 ] f ( [ 1 , [ 2 , \"a\" ] , 3.0 ] , $1 )").to_string(),
        "1 [0-3,16,$0] f([1,[2,\"a\"],3.0], $1)"
    );
    assert_eq!(
        reply("1, [0-3], stop(0); 2 ,[4] , stop ( 1 )").to_string(),
        "1 [0-3] stop(0); 2 [4] stop(1)"
    );
}

#[test]
fn numbers() {
    let v = |s: &str| s.parse::<Value>().unwrap_or_else(|e| panic!("{s:?}: {e}"));
    assert_eq!(v("42"), Value::Int(42));
    assert_eq!(v("-7"), Value::Int(-7));
    assert_eq!(v("+7"), Value::Int(7));
    assert_eq!(v("007"), Value::Int(7));
    assert_eq!(v("0x1F"), Value::Int(31));
    assert_eq!(v("0xfe08"), Value::Int(0xfe08));
    assert_eq!(v("-0x10"), Value::Int(-16));
    assert_eq!(v("9223372036854775807"), Value::Int(i64::MAX));
    assert_eq!(v("-9223372036854775808"), Value::Int(i64::MIN));
    assert_eq!(v("-0x8000000000000000"), Value::Int(i64::MIN));
    assert_eq!(v("1.5"), Value::Float(1.5));
    assert_eq!(v("-2e3"), Value::Float(-2000.0));
    assert_eq!(v("1E+3"), Value::Float(1000.0));
    assert_eq!(v(".5"), Value::Float(0.5));
    assert_eq!(v("5."), Value::Float(5.0));
    assert_eq!(v("1e5"), Value::Float(1e5));
    assert_eq!(v("inf"), Value::Float(f64::INFINITY));
    assert_eq!(v("-INF"), Value::Float(f64::NEG_INFINITY));
    assert!(matches!(v("nan"), Value::Float(x) if x.is_nan()));
    for (x, s) in [
        (12.0, "12.0"),
        (1e-7, "1e-7"),
        (1e300, "1e300"),
        (-0.0, "-0.0"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::NAN, "nan"),
    ] {
        assert_eq!(Value::Float(x).to_string(), s);
    }
    for (text, column, problem) in [
        (
            "9223372036854775808",
            1,
            "integer 9223372036854775808 does not fit in 64 bits",
        ),
        (
            "0x8000000000000000",
            1,
            "integer 0x8000000000000000 does not fit in 64 bits",
        ),
        ("1e400", 1, "float 1e400 is out of range for a double"),
        ("12abc", 3, "unexpected 'a' in number '12abc'"),
        ("1e", 2, "exponent of number '1e' has no digits"),
        (
            "0x",
            1,
            "expected hex digits after '0x', found end of input",
        ),
        (
            "-",
            1,
            "expected a value (integer, float, string, list or $n), found '-'",
        ),
    ] {
        let e = text.parse::<Value>().unwrap_err();
        assert_eq!((e.column, e.problem.as_str()), (column, problem), "{text}");
    }
}

#[test]
fn strings() {
    let v: Value = r#""a\"b\\c\nd\te\x41\101\0\?\'""#.parse().unwrap();
    assert_eq!(v, Value::Str("a\"b\\c\nd\teAA\0?'".into()));
    let v: Value = r#""caf\xc3\xa9 ünï""#.parse().unwrap();
    assert_eq!(v, Value::Str("café ünï".into()));
    let s = Value::Str("q\"b\\s\nt\tr\r\u{1}\u{7f}é".into());
    assert_eq!(s.to_string(), r#""q\"b\\s\nt\tr\r\x01\x7fé""#);
    assert_eq!(s.to_string().parse::<Value>().unwrap(), s);
    // `\x` takes at most two hex digits.
    assert_eq!(
        r#""\x411""#.parse::<Value>().unwrap(),
        Value::Str("A1".into())
    );
    let e = r#""\xff""#.parse::<Value>().unwrap_err();
    assert_eq!(e.column, 1);
    assert!(e.problem.contains("not valid UTF-8"), "{e}");
    let e = r#""\400""#.parse::<Value>().unwrap_err();
    assert_eq!(
        (e.column, e.problem.as_str()),
        (2, r"octal escape '\400' is above \377")
    );
    let e = r#""\x""#.parse::<Value>().unwrap_err();
    assert_eq!(e.column, 2);
}

#[test]
fn error_positions() {
    let cases: &[(&str, usize, usize, &str)] = &[
        (
            "1 [] stop([]; 2 [] continue([])",
            1,
            13,
            "expected ',' or ')' after parameter 1 of 'stop', found ';'",
        ),
        (
            "1 [] stop([]",
            1,
            13,
            "expected ',' or ')' after parameter 1 of 'stop', found end of input",
        ),
        (
            "1 [] print(\"abc)",
            1,
            12,
            "unterminated string: no closing '\"' before the end of input",
        ),
        (
            "1 [] print(\"abc)\n, 2 [] f()",
            1,
            12,
            "unterminated string: no closing '\"' before the end of the line \
             (write \\n for a line break)",
        ),
        (
            "1 [] print(\"a\\qb\")",
            1,
            14,
            "unknown escape '\\q' in string",
        ),
        (
            "1 [3-1] stop([])",
            1,
            4,
            "reversed range 3-1 in the node list (write 1-3)",
        ),
        (
            "1 [] stop([]) junk",
            1,
            15,
            "unexpected 'junk' after the request (actions are separated by ',' or ';')",
        ),
        (
            "1 [] stop([]) )",
            1,
            15,
            "unexpected ')' after the request (actions are separated by ',' or ';')",
        ),
        (
            "1 [] stop($)",
            1,
            11,
            "expected a number after '$', found ')'",
        ),
        (
            "1 [$] stop()",
            1,
            4,
            "expected a number after '$', found ']'",
        ),
        (
            "",
            1,
            1,
            "empty request: expected a request id (an integer)",
        ),
        (
            " \n  ",
            2,
            3,
            "empty request: expected a request id (an integer)",
        ),
        (
            "1 [] f(),\n 2 [] g(); 3 [] h()",
            2,
            10,
            "cannot mix ',' (parallel) and ';' (sequential) in one action list",
        ),
        (
            "1 [] e(): 2 [] f(): 3 [] g()",
            1,
            19,
            "a request has only one event: unexpected second ':'",
        ),
        (
            "1 [] f(), 2 [] e(): 3 [] g()",
            1,
            19,
            "unexpected ':': only the first basic request of a request can be the event",
        ),
        (
            "1 [] f(),",
            1,
            10,
            "expected an action after ',', starting with a request id (an integer), \
             found end of input",
        ),
        (
            "1 [] e():",
            1,
            10,
            "expected an action after the event's ':', starting with a request id \
             (an integer), found end of input",
        ),
        (
            "x [] f()",
            1,
            1,
            "expected a request, starting with a request id (an integer), found 'x'",
        ),
        (
            "1.5 [] f()",
            1,
            1,
            "request id must be an integer, found '1.5'",
        ),
        (
            "1 stop([])",
            1,
            3,
            "expected '[' opening the receiver node list after request id 1, found 'stop'",
        ),
        (
            "1 [] (1)",
            1,
            6,
            "expected a service name after the node list, found '('",
        ),
        (
            "1 [] stop [1]",
            1,
            11,
            "expected '(' after service name 'stop', found '['",
        ),
        (
            "1 [] f(1,)",
            1,
            10,
            "expected a value (integer, float, string, list or $n), found ')'",
        ),
        (
            "1 [] f(foo)",
            1,
            8,
            "expected a value (integer, float, string, list or $n), found 'foo' \
             (strings must be quoted)",
        ),
        (
            "1 [] f([1 2])",
            1,
            11,
            "expected ',' or ']' after element 1 of the list opened at column 8, found '2'",
        ),
        (
            "1 [-1] f()",
            1,
            4,
            "expected a node number, a range or $n in the node list, found '-1'",
        ),
        (
            "1 [4294967296] f()",
            1,
            4,
            "node number 4294967296 does not fit in 32 bits",
        ),
        (
            "1 [0-] f()",
            1,
            6,
            "expected the node number ending the range 0-, found ']'",
        ),
        (
            "1 [$0-3] f()",
            1,
            6,
            "a $-reference cannot start a range of nodes",
        ),
        (
            "1 [1 2] f()",
            1,
            6,
            "expected ',' or ']' in the node list, found '2'",
        ),
    ];
    for &(text, line, column, problem) in cases {
        let e = req_err(text);
        assert_eq!(
            (e.line, e.column, e.problem.as_str()),
            (line, column, problem),
            "{text:?}"
        );
        let prefix = text
            .split('\n')
            .take(line - 1)
            .map(|l| l.len() + 1)
            .sum::<usize>();
        assert_eq!(e.offset, prefix + column - 1, "{text:?}");
    }
    let e = req_err("1 [] stop([]; 2 [] continue([])");
    assert_eq!(
        e.to_string(),
        "column 13: expected ',' or ')' after parameter 1 of 'stop', found ';'"
    );
    let e = req_err("1 [] f(),\n 2 [] g(); 3 [] h()");
    assert_eq!(
        e.to_string(),
        "line 2, column 10: cannot mix ',' (parallel) and ';' (sequential) in one action list"
    );
    // Columns count characters, not bytes.
    let e = req_err("1 [] f(\"é\", x)");
    assert_eq!((e.column, e.offset), (13, 13));
    // Deep nesting is refused, not a stack overflow.
    let deep = format!("1 [] f({}{})", "[".repeat(100_000), "]".repeat(100_000));
    assert!(req_err(&deep).problem.contains("nested more than"));
}

#[test]
fn reply_errors() {
    for (text, column, problem) in [
        (
            "1 [$0] stop(0)",
            4,
            "sender nodes must be node numbers, not $-references",
        ),
        (
            "1 [0] stop(0), 2 [1] stop(0)",
            14,
            "unexpected ',' after the reply (basic replies are separated by ';')",
        ),
        ("", 1, "empty reply: expected a request id (an integer)"),
        (
            "1 [0] stop(0);",
            15,
            "expected a basic reply after ';', starting with a request id (an integer), \
             found end of input",
        ),
    ] {
        let e = parse_reply(text).unwrap_err();
        assert_eq!(
            (e.column, e.problem.as_str()),
            (column, problem),
            "{text:?}"
        );
    }
    // An empty sender list reads as the empty set (no node).
    assert!(reply("1 [] stop(0)").0[0].senders.is_empty());
}

#[test]
fn from_str_of_parts() {
    let n: Nodes = "[0-3, 7, $0]".parse().unwrap();
    assert_eq!(n.ids, ids(&[(0, 3), (7, 7)]));
    assert_eq!(n.refs, [0]);
    assert_eq!(n.to_string(), "[0-3,7,$0]");
    assert_eq!(
        n.nodes(),
        [0, 1, 2, 3, 7]
            .map(Node::Id)
            .into_iter()
            .chain([Node::Ref(0)])
            .collect::<Vec<_>>()
    );
    assert_eq!(Nodes::from_nodes(n.nodes()), n);
    assert_eq!(Nodes::from_nodes([]), Nodes::all());
    assert_eq!("[]".parse::<Nodes>().unwrap(), Nodes::all());
    assert!("[1] x".parse::<Nodes>().is_err());
    let b: BasicRequest = " 19 [$0] stop($1) ".parse().unwrap();
    assert_eq!(b.to_string(), "19 [$0] stop($1)");
    assert!(
        "19 [$0] stop($1), 2 [] f()"
            .parse::<BasicRequest>()
            .is_err()
    );
    let b: BasicReply = "1 [0-1023] stop(0)".parse().unwrap();
    assert_eq!(b.senders.len(), 1024);
}

#[test]
fn a_million_nodes_in_range_form() {
    let text = "1 [0-1048575] stop([])";
    let start = Instant::now();
    let r = req(text);
    let printed = r.to_string();
    let rep = reply("1 [0-1048575] stop(0)");
    let rep_printed = rep.to_string();
    let elapsed = start.elapsed();
    assert_eq!(r.actions.actions()[0].nodes.ids.len(), 1 << 20);
    assert_eq!(printed, text);
    assert_eq!(rep_printed, "1 [0-1048575] stop(0)");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    // A list written out id by id comes back in range form.
    let list: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let r = req(&format!("1 [{}] stop([])", list.join(",")));
    assert_eq!(r.to_string(), "1 [0-99999] stop([])");
    // And a list of a hundred thousand separate ids round-trips.
    let list: Vec<String> = (0..100_000).map(|i| (2 * i).to_string()).collect();
    let text = format!("1 [{}] stop([])", list.join(","));
    assert_eq!(req(&text).to_string(), text);
}

fn basic_reply(id: i64, senders: IdSet, results: Vec<Value>) -> BasicReply {
    BasicReply {
        id,
        senders,
        service: "stop".into(),
        results,
        failure: None,
    }
}

#[test]
fn unify_merges_equal_results_only() {
    let replies = vec![
        basic_reply(1, IdSet::single(0), vec![Value::Int(0)]),
        basic_reply(1, IdSet::single(1), vec![Value::Int(-1)]),
        basic_reply(1, IdSet::range(2..=5), vec![Value::Int(0)]),
        basic_reply(2, IdSet::single(6), vec![Value::Int(0)]),
        basic_reply(1, IdSet::single(7), vec![Value::Int(-1)]),
        basic_reply(1, IdSet::single(8), vec![Value::Float(0.0)]),
        basic_reply(1, IdSet::single(9), vec![Value::Int(0)]),
    ];
    let u = unify(replies);
    assert_eq!(
        Reply(u).to_string(),
        "1 [0,2-5,9] stop(0); 1 [1,7] stop(-1); 2 [6] stop(0); 1 [8] stop(0.0)"
    );
    let mut other = basic_reply(1, IdSet::single(3), vec![Value::Int(0)]);
    other.service = "continue".into();
    let u = unify(vec![
        basic_reply(1, IdSet::single(0), vec![Value::Int(0)]),
        other,
    ]);
    assert_eq!(u.len(), 2);
    assert!(unify(vec![]).is_empty());
    // Many single-node replies with one answer become one reply.
    let many: Vec<_> = (0..1u32 << 17)
        .map(|i| basic_reply(1, IdSet::single(i), vec![Value::Int(0)]))
        .collect();
    assert_eq!(Reply(unify(many)).to_string(), "1 [0-131071] stop(0)");
}

#[derive(Default)]
struct Monitor {
    stopped: Vec<i64>,
    counter: i64,
}

fn stop_handler() -> Handler<Monitor> {
    handler(|m: &mut Monitor, r| {
        for p in &r.params {
            if let Value::Int(t) = p {
                m.stopped.push(*t);
            }
        }
        Ok(vec![Value::Int(0)])
    })
}

#[test]
fn registry_prefix_rules() {
    let mut reg: Registry<Monitor> = Registry::new();
    reg.register_base("stop", stop_handler());
    reg.register_base("process_info", handler(|_, _| Ok(vec![Value::Int(0)])));
    reg.add_extension("pe", |x| {
        assert_eq!(x.prefix(), "pe");
        x.register(
            "add_to_counter",
            handler(|m: &mut Monitor, r| match r.params.first() {
                Some(Value::Int(n)) => {
                    m.counter += n;
                    Ok(vec![Value::Int(0)])
                }
                _ => Err(ServiceError::bad_argument("pe_add_to_counter(integer n)")),
            }),
        );
        x.register("start_integrator", handler(|_, _| Ok(vec![])));
    })
    .unwrap();
    assert_eq!(
        reg.names(),
        [
            "pe_add_to_counter",
            "pe_start_integrator",
            "process_info",
            "stop"
        ]
    );
    assert_eq!(reg.prefixes(), ["pe"]);
    assert!(reg.get("pe_start_integrator").is_some());
    assert!(reg.get("start_integrator").is_none());

    // Calls.
    let mut m = Monitor::default();
    let r = req("1 [] stop(3, 4), 2 [] pe_add_to_counter(5), 3 [] pe_add_to_counter(2)");
    for a in r.actions.actions() {
        assert_eq!(reg.call(&mut m, a).unwrap(), [Value::Int(0)]);
    }
    assert_eq!((m.stopped.as_slice(), m.counter), ([3, 4].as_slice(), 7));
    let bad: BasicRequest = "4 [] pe_add_to_counter(\"x\")".parse().unwrap();
    assert_eq!(
        reg.call(&mut m, &bad).unwrap_err().to_string(),
        "pe_add_to_counter(integer n)"
    );
    let unknown: BasicRequest = "5 [] foo()".parse().unwrap();
    assert_eq!(
        reg.call(&mut m, &unknown).unwrap_err(),
        ServiceError::new(
            ErrorKind::UnknownService,
            "unknown service 'foo' (known: pe_add_to_counter, pe_start_integrator, \
             process_info, stop)"
        )
    );

    // One prefix per extension.
    let e = reg.add_extension("pe", |x| x.register("other", handler(|_, _| Ok(vec![]))));
    assert_eq!(
        e.unwrap_err().to_string(),
        "extension prefix 'pe' is already taken (one prefix per extension)"
    );
    // Nested prefixes could produce the same name from two extensions.
    for nested in ["pe_x", "p"] {
        let e = reg.add_extension(nested, |_| {});
        if nested == "pe_x" {
            assert_eq!(
                e.unwrap_err().to_string(),
                "extension prefix 'pe_x' overlaps extension prefix 'pe' \
                 (their service names could clash)"
            );
        } else {
            e.unwrap();
        }
    }
    // Bad prefixes.
    assert!(
        reg.add_extension("", |_| {})
            .unwrap_err()
            .to_string()
            .contains("base services")
    );
    assert!(
        reg.add_extension("1x", |_| {})
            .unwrap_err()
            .to_string()
            .contains("not a C identifier")
    );
    // A clash with a base service refuses the whole extension, prefix included.
    let e = reg.add_extension("process", |x| {
        x.register("list", handler(|_, _| Ok(vec![])));
        x.register("info", handler(|_, _| Ok(vec![])));
        x.register("list", handler(|_, _| Ok(vec![])));
        x.register("bad name", handler(|_, _| Ok(vec![])));
    });
    assert_eq!(
        e.unwrap_err().to_string(),
        "extension 'process' not added: extension 'process' registers 'process_list' twice; \
         service name 'bad name' of extension 'process' is not made of letters, digits and '_'; \
         service 'process_info' already exists (a base service)"
    );
    assert!(reg.get("process_list").is_none());
    assert_eq!(reg.prefixes(), ["p", "pe"]);
    reg.add_extension("process", |x| {
        x.register("list", handler(|_, _| Ok(vec![])))
    })
    .unwrap();
    assert_eq!(reg.prefixes(), ["p", "pe", "process"]);
    assert!(reg.get("process_list").is_some());
    // An empty registry names no known services.
    let empty: Registry<()> = Registry::default();
    assert_eq!(
        empty.call(&mut (), &unknown).unwrap_err().to_string(),
        "unknown service 'foo' (known: none)"
    );
}

#[test]
fn registry_aliases_name_the_same_service() {
    let mut reg: Registry<u32> = Registry::new();
    reg.register_base(
        "cont",
        handler(|n: &mut u32, _| {
            *n += 1;
            Ok(vec![Value::Int(0)])
        }),
    );
    reg.register_alias("continue", "cont").unwrap();
    let req = parse_request("1 [] continue()").unwrap();
    let mut calls = 0;
    assert_eq!(
        reg.call(&mut calls, &req.actions.actions()[0]).unwrap(),
        [Value::Int(0)]
    );
    assert_eq!(calls, 1, "the alias ran cont's handler");
    assert_eq!(reg.names(), ["cont", "continue"]);
    // No alias of an unknown service, no alias over a taken name.
    assert!(reg.register_alias("go", "resume").is_err());
    assert!(reg.register_alias("continue", "cont").is_err());
    assert!(reg.register_alias("cont", "cont").is_err());
    // An extension may not register a name an alias holds.
    let mut reg: Registry<u32> = Registry::new();
    reg.register_base("x", handler(|_: &mut u32, _| Ok(vec![])));
    reg.register_alias("pe_run", "x").unwrap();
    let e = reg
        .add_extension("pe", |x| x.register("run", handler(|_, _| Ok(vec![]))))
        .unwrap_err();
    assert!(
        e.message()
            .contains("'pe_run' already exists (a name for 'x')"),
        "{e}"
    );
    // A base service registered under an alias's name replaces the alias.
    reg.register_base(
        "pe_run",
        handler(|n: &mut u32, _| Ok(vec![Value::Int(i64::from(*n))])),
    );
    let req = parse_request("1 [] pe_run()").unwrap();
    assert_eq!(
        reg.call(&mut 7, &req.actions.actions()[0]).unwrap(),
        [Value::Int(7)]
    );
}

fn value_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>()
            .prop_filter("NaN is never equal to itself", |x| !x.is_nan())
            .prop_map(Value::Float),
        Just(Value::Float(f64::INFINITY)),
        prop::collection::vec(any::<char>(), 0..8)
            .prop_map(|c| Value::Str(c.into_iter().collect())),
        "[a-z\"\\\\\n\t ]{0,6}".prop_map(Value::Str),
        any::<u32>().prop_map(Value::Ref),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Value::List)
    })
}

fn idset_strategy(min: usize) -> impl Strategy<Value = IdSet> {
    prop::collection::vec((any::<u32>(), 0u32..2000), min..4).prop_map(|runs| {
        let mut s = IdSet::new();
        for (i, (start, len)) in runs.into_iter().enumerate() {
            // Mix small ids (dense, adjacent runs) with anywhere in the 32-bit space.
            let start = if i % 2 == 0 { start % 5000 } else { start };
            s.insert_range(start..=start.saturating_add(len));
        }
        s
    })
}

fn nodes_strategy() -> impl Strategy<Value = Nodes> {
    prop_oneof![
        Just(Nodes::all()),
        (idset_strategy(1), prop::collection::vec(0u32..10, 0..3)).prop_map(|(ids, refs)| {
            Nodes {
                ids,
                refs,
                all: false,
            }
        }),
        prop::collection::vec(any::<u32>(), 1..3).prop_map(|refs| Nodes {
            ids: IdSet::new(),
            refs,
            all: false,
        }),
    ]
}

fn basic_request_strategy() -> impl Strategy<Value = BasicRequest> {
    (
        any::<i64>(),
        nodes_strategy(),
        "[a-zA-Z_][a-zA-Z0-9_]{0,12}",
        prop::collection::vec(value_strategy(), 0..4),
    )
        .prop_map(|(id, nodes, service, params)| BasicRequest {
            id,
            nodes,
            service,
            params,
        })
}

fn request_strategy() -> impl Strategy<Value = Request> {
    (
        prop::option::of(basic_request_strategy()),
        any::<bool>(),
        prop::collection::vec(basic_request_strategy(), 1..4),
    )
        .prop_map(|(event, seq, actions)| Request {
            event,
            // One action is always `Par`: there is no separator to tell.
            actions: if seq && actions.len() > 1 {
                ActionList::Seq(actions)
            } else {
                ActionList::Par(actions)
            },
        })
}

fn reply_strategy() -> impl Strategy<Value = Reply> {
    prop::collection::vec(
        (
            any::<i64>(),
            idset_strategy(0),
            "[a-zA-Z_][a-zA-Z0-9_]{0,12}",
            prop::collection::vec(value_strategy(), 0..4),
            prop::option::of(prop::sample::select(ErrorKind::ALL.to_vec())),
        )
            .prop_map(|(id, senders, service, results, failure)| BasicReply {
                id,
                senders,
                service,
                results,
                failure,
            }),
        1..4,
    )
    .prop_map(Reply)
}

proptest! {
    #[test]
    fn request_round_trip(r in request_strategy()) {
        let text = r.to_string();
        prop_assert_eq!(parse_request(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?, r);
    }

    #[test]
    fn reply_round_trip(r in reply_strategy()) {
        let text = r.to_string();
        prop_assert_eq!(parse_reply(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?, r);
    }

    #[test]
    fn value_round_trip(v in value_strategy()) {
        let text = v.to_string();
        prop_assert_eq!(text.parse::<Value>().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?, v);
    }

    #[test]
    fn garbage_never_panics(text in "[0-9a-zx$\\[\\](),;:.\"\\\\ \n-]{0,40}|\\PC{0,20}") {
        for e in [parse_request(&text).err(), parse_reply(&text).err()].into_iter().flatten() {
            prop_assert!(e.offset <= text.len());
            prop_assert!(e.line >= 1 && e.column >= 1);
            prop_assert!(text.is_char_boundary(e.offset));
        }
    }
}

/// A failed reply carries its kind after the service name; the kind, not the text, makes
/// it a failure: a result saying "error" is a result, a failure need not say "error".
#[test]
fn a_failure_is_a_kind_not_a_text() {
    let failed: BasicReply = "3 [0-3] stop!no_process(\"nothing to stop\")"
        .parse()
        .unwrap();
    assert_eq!(failed.failure, Some(ErrorKind::NoProcess));
    assert!(failed.is_failure());
    assert_eq!(
        failed.to_string(),
        "3 [0-3] stop!no_process(\"nothing to stop\")"
    );
    let said: BasicReply = "4 [0] print(\"error: not really\")".parse().unwrap();
    assert!(!said.is_failure());
    // Built from a service's outcome, with the errors underneath in the message.
    let io = std::io::Error::other("ptrace refused");
    let e = ServiceError::with_source(ErrorKind::Failed, "stop", io);
    assert!(std::error::Error::source(&e).is_some());
    let r = BasicReply::answer(5, "stop", Err(e));
    assert_eq!(r.to_string(), "5 [] stop!failed(\"stop: ptrace refused\")");
    // Kinds round-trip by name; an unknown one is refused where it stands.
    for k in ErrorKind::ALL {
        assert_eq!(k.name().parse::<ErrorKind>(), Ok(k));
    }
    let e = "1 [] stop!wobbly(0)".parse::<BasicReply>().unwrap_err();
    assert_eq!(e.to_string(), "column 11: unknown failure kind 'wobbly'");
    // Requests have no failure.
    assert!("1 [] stop!failed(0)".parse::<BasicRequest>().is_err());
    // Equal failures unify; a failure never merges with a result of the same text.
    let ok = BasicReply::answer(6, "print", Ok(vec![Value::Str("x".into())]));
    let bad = BasicReply::answer(6, "print", Err(ServiceError::bad_argument("x")));
    assert_eq!(unify(vec![ok.clone(), bad.clone(), bad]).len(), 2);
}
