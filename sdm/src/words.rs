//! The console's plain words for what servers send in OMIS: events (`process_terminated(
//! "exited",0)` is `exited with status 0`) and replies (`stack_backtrace!wrong_state("…")`
//! is `error: …`). Raw OMIS stays for the `omis` command and `--json`.

use sdm_client::iof::ProgramEnd;
use sdm_omis::{BasicReply, Value, parse_reply};

/// An event text in plain words. `breakpoint_number` gives the console's number of a
/// breakpoint by its location. Replies of event actions (they start with their request id)
/// are left as they are: they answer an `omis` request.
pub fn event(text: &str, breakpoint_number: impl Fn(&str) -> Option<u32>) -> String {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        return text.to_owned();
    }
    // An event is a reply without request id and nodes.
    let Some(r) = parse_reply(&format!("0 [] {text}"))
        .ok()
        .and_then(|r| r.0.into_iter().next())
    else {
        return format!("event {text}");
    };
    match ProgramEnd::parse(text) {
        Some(ProgramEnd::Exited(code)) => return format!("exited with status {code}"),
        Some(ProgramEnd::Killed(sig)) => return format!("killed by signal {sig}"),
        None => {}
    }
    let p = &r.results;
    match (r.service.as_str(), p.first(), p.get(1)) {
        // `work() at prog.c:20` (module+offset without line information).
        ("breakpoint", Some(Value::Str(at)), Some(Value::Str(place))) => {
            match breakpoint_number(at) {
                Some(n) => format!("breakpoint {n} hit in {place}"),
                None => format!("breakpoint hit in {place}"),
            }
        }
        ("breakpoint", Some(Value::Str(at)), addr) => {
            let addr = match addr {
                Some(Value::Int(a)) => format!(" ({a:#x})"),
                _ => String::new(),
            };
            match breakpoint_number(at) {
                Some(n) => format!("breakpoint {n} hit at {at}{addr}"),
                None => format!("breakpoint hit at {at}{addr}"),
            }
        }
        ("stopped_at", Some(Value::Str(why)), Some(Value::Str(what))) => {
            let place = match p.get(2) {
                Some(Value::Str(place)) if !place.is_empty() => format!(" at {place}"),
                _ => String::new(),
            };
            match why.as_str() {
                "breakpoint" => match breakpoint_number(what) {
                    Some(n) => format!("breakpoint {n}{place}"),
                    None => format!("breakpoint {what}{place}"),
                },
                "watchpoint" => format!("watchpoint {what}{place}"),
                "signal" => format!("stopped by {what}{place}"),
                other => format!("stopped ({other}){place}"),
            }
        }
        ("error", Some(Value::Str(why)), _) => format!("error: {why}"),
        _ => format!("event {text}"),
    }
}

/// Whether a reply reports a failure (it carries a failure kind: a request the server
/// could not read, a service that failed, a process that has ended), whatever its text.
pub fn is_error(r: &BasicReply) -> bool {
    r.is_failure()
}

/// How the process ended, in words, if `r` is the answer of a server whose process has
/// ended (`process_terminated("exited",N)`) to a request that needs a live one.
fn ended(r: &BasicReply) -> Option<String> {
    if r.service != "process_terminated" {
        return None;
    }
    match r.results.as_slice() {
        [Value::Str(how), Value::Int(c)] if how == "exited" => {
            Some(format!("exited with status {c}"))
        }
        [Value::Str(how), Value::Str(sig)] if how == "killed" => {
            Some(format!("killed by signal {sig}"))
        }
        _ => None,
    }
}

/// A reply in plain words: its text result (a status line, an error), `ok` for a bare
/// success, how the process ended, otherwise its results as OMIS values.
pub fn reply(r: &BasicReply) -> String {
    if let Some(end) = ended(r) {
        return end;
    }
    match r.results.as_slice() {
        [Value::Str(s)] if r.is_failure() => format!("error: {s}"),
        [Value::Str(s), ..] => s.clone(),
        [Value::Int(0)] => "ok".into(),
        results => results
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(at: &str) -> Option<u32> {
        (at == "tick").then_some(1)
    }

    #[test]
    fn events_in_plain_words() {
        assert_eq!(
            event("process_terminated(\"exited\",0)", numbered),
            "exited with status 0"
        );
        assert_eq!(
            event("process_terminated(\"killed\",\"SIGKILL\")", numbered),
            "killed by signal SIGKILL"
        );
        assert_eq!(
            event("breakpoint(\"tick\",\"tick() at prog.c:42\")", numbered),
            "breakpoint 1 hit in tick() at prog.c:42"
        );
        assert_eq!(
            event("breakpoint(\"other\",\"prog+0x1139\")", numbered),
            "breakpoint hit in prog+0x1139"
        );
        assert_eq!(
            event("breakpoint(\"tick\",0x555fc0b95193)", numbered),
            "breakpoint 1 hit at tick (0x555fc0b95193)"
        );
        assert_eq!(
            event("breakpoint(\"other\",4096)", numbered),
            "breakpoint hit at other (0x1000)"
        );
        assert_eq!(
            event(
                "stopped_at(\"breakpoint\",\"tick\",\"prog.c:42 in tick()\")",
                numbered
            ),
            "breakpoint 1 at prog.c:42 in tick()"
        );
        assert_eq!(
            event(
                "stopped_at(\"signal\",\"SIGSEGV\",\"prog.c:7 in f()\")",
                numbered
            ),
            "stopped by SIGSEGV at prog.c:7 in f()"
        );
        assert_eq!(
            event("error(\"event x not handled\")", numbered),
            "error: event x not handled"
        );
        // Replies of event actions answer an `omis` request: raw.
        assert_eq!(event("3 [] print(\"x\")", numbered), "3 [] print(\"x\")");
        assert_eq!(event("new_thing(1)", numbered), "event new_thing(1)");
        assert_eq!(event("not omis ((", numbered), "event not omis ((");
    }

    #[test]
    fn replies_in_plain_words() {
        let r = |t: &str| parse_reply(t).unwrap().0.remove(0);
        let e = r("3 [0-3] stack_backtrace!wrong_state(\"the process must be stopped first\")");
        assert_eq!(reply(&e), "error: the process must be stopped first");
        assert!(is_error(&e));
        let bad = r("0 [] error!bad_request(\"bad request: column 3\")");
        assert!(is_error(&bad));
        assert_eq!(reply(&bad), "error: bad request: column 3");
        let ok = r("1 [] stop(0)");
        assert!(!is_error(&ok));
        assert_eq!(reply(&ok), "ok");
        // The failure kind decides, not the words: a result saying "error" succeeded.
        let said = r("2 [0] print(\"error: only words\")");
        assert!(!is_error(&said));
        assert_eq!(reply(&said), "error: only words");
        assert_eq!(reply(&r("1 [] number_of_nodes(4)")), "4");
        // About a process that has ended: how it ended, a failure of the request.
        let ended = r("4 [0-3] process_terminated!ended(\"exited\",3)");
        assert_eq!(reply(&ended), "exited with status 3");
        assert!(is_error(&ended));
        let killed = r("4 [0-3] process_terminated!ended(\"killed\",\"SIGTERM\")");
        assert_eq!(reply(&killed), "killed by signal SIGTERM");
    }
}
