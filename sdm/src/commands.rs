//! What the console knows about its commands apart from running them: the command table
//! (`help`, `help COMMAND`), the numbered breakpoints (`break`, `info break`, `delete`), and
//! tab completion for the interactive console (command names, and function names for
//! `break` from the program's ELF symbol table).

use std::borrow::Cow;
use std::path::Path;

use sdm_proto::IdSet;

/// One console command: its name, its usage line and what it does.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    /// The name typed.
    pub name: &'static str,
    /// The arguments it takes.
    pub usage: &'static str,
    /// One line saying what it does.
    pub about: &'static str,
}

/// Every console command, in the order `help` lists them. `IDS` is a set of ranks, `2`,
/// `0-3,7` or `[0-3,7]`; without it a command goes to every rank.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "stop",
        usage: "stop [IDS]",
        about: "stop the programs",
    },
    Command {
        name: "cont",
        usage: "cont [IDS]",
        about: "continue the programs (also `continue`, `c`)",
    },
    Command {
        name: "continue",
        usage: "continue [IDS]",
        about: "continue the programs (also `cont`)",
    },
    Command {
        name: "status",
        usage: "status [IDS]",
        about: "what each program is doing: running, stopped where, exited, killed",
    },
    Command {
        name: "bt",
        usage: crate::stacks::BT_USAGE,
        about: "stack traces of every thread of every rank merged into one call tree, each frame by function and file:line (running programs are stopped for it and continued); threads are traces of their own, counted per edge (xN); K samples counted per edge; --classes: the ranks ending at each leaf, split by call site (stacks collapsed at the program's first call into a library; --full: whole); --functions: frames by function only; --thread N: one thread (see `thread`); --json: file, line, function, module and offset per frame; --dot/--svg: the tree as a graph; --flame FILE.svg/--folded FILE: a flame graph and the folded stacks (flamegraph.pl, speedscope) of the samples, the whole job in FILE and each class in NAME.class-N.EXT beside it; --html FILE: the hang report, one HTML page (tree, classes with their source lines, every rank's host, pid and state)",
    },
    Command {
        name: "break",
        usage: "break FUNCTION|0xADDRESS|FILE:LINE [IDS] [if COND]",
        about: "set a breakpoint (running programs are stopped for it and continued); the programs stop when they reach it (FILE:LINE and conditions through gdb); hits print merged, `[1,3] breakpoint 2 at f.c:42 in relax()`",
    },
    Command {
        name: "tbreak",
        usage: "tbreak FUNCTION|FILE:LINE [IDS] [if COND]",
        about: "a breakpoint deleted at its first hit",
    },
    Command {
        name: "watch",
        usage: "watch EXPR [IDS]",
        about: "stop when the value of EXPR changes (a hardware watchpoint where the machine has one)",
    },
    Command {
        name: "info",
        usage: "info break | info locals [IDS] | info args [IDS] | info threads [IDS] | info GDB-TOPIC [IDS]",
        about: "list the breakpoints (number, location, ranks), the local variables (arguments) of the selected frame, or every thread of each rank and where it is, merged by value; other topics go to gdb",
    },
    Command {
        name: "thread",
        usage: "thread [N|all]",
        about: "show only thread N of each rank in `bt` (numbered as `info threads` lists them, the main thread 1), or every thread again (`all`, the default); alone: which",
    },
    Command {
        name: "print",
        usage: "print [-stats] EXPR [IDS]",
        about: "evaluate EXPR in each rank's selected frame, merged by value: `[0-6] x = 42` (IDS after EXPR: `[0-3]` or a group name); -stats: min, mean, max of a number and the ranks holding them, reduced in the tree",
    },
    Command {
        name: "frame",
        usage: "frame N [IDS]",
        about: "select stack frame N (0 is the innermost) for print, info locals and list",
    },
    Command {
        name: "up",
        usage: "up [IDS]",
        about: "select the frame of the caller",
    },
    Command {
        name: "down",
        usage: "down [IDS]",
        about: "select the frame called by the selected one",
    },
    Command {
        name: "list",
        usage: "list [IDS]",
        about: "the source around the selected frame's line, merged where ranks stand on the same line",
    },
    Command {
        name: "step",
        usage: "step [IDS]",
        about: "run to the next source line, into calls; says where each rank now stands",
    },
    Command {
        name: "next",
        usage: "next [IDS]",
        about: "run to the next source line, over calls; says where each rank now stands",
    },
    Command {
        name: "finish",
        usage: "finish [IDS]",
        about: "run until the selected function returns; says where and the value returned",
    },
    Command {
        name: "until",
        usage: "until [LOCATION] [IDS]",
        about: "run until a line after the current one (or LOCATION) is reached",
    },
    Command {
        name: "where",
        usage: "where [OPTIONS] [IDS]",
        about: "gdb's name for `bt`",
    },
    Command {
        name: "ptype",
        usage: "ptype EXPR [IDS]",
        about: "the type of an expression, from gdb (also `whatis`)",
    },
    Command {
        name: "whatis",
        usage: "whatis EXPR [IDS]",
        about: "the type name of an expression, from gdb",
    },
    Command {
        name: "x",
        usage: "x/FMT ADDRESS [IDS]",
        about: "examine memory as gdb's `x` does, e.g. `x/4dw &a`",
    },
    Command {
        name: "set",
        usage: "set var NAME = VALUE [IDS]",
        about: "assign to a variable of the programs, through gdb",
    },
    Command {
        name: "display",
        usage: "display EXPR [IDS]",
        about: "print an expression now, as gdb's `display` does",
    },
    Command {
        name: "gdb",
        usage: "gdb COMMAND [IDS]",
        about: "run a gdb command on the ranks' gdbs (not one that runs or lets go of the process); identical answers merge",
    },
    Command {
        name: "group",
        usage: "group [NAME IDS | NAME = class K | -d NAME]",
        about: "name a set of ranks (IDS may combine ranks and groups with | & -; class K of the last `bt --classes`); without arguments, list the groups",
    },
    Command {
        name: "focus",
        usage: "focus [IDS|NAME]",
        about: "commands without IDS act on these ranks (shown in the prompt); `focus` alone: all ranks",
    },
    Command {
        name: "delete",
        usage: "delete [N...]",
        about: "delete breakpoints by number (all without a number)",
    },
    Command {
        name: "kill",
        usage: "kill [IDS]",
        about: "kill the programs",
    },
    Command {
        name: "detach",
        usage: "detach [--stopped] [IDS]",
        about: "let processes attached to (sdm attach, sdm run --attach) go: breakpoints and watchpoints removed, untraced, running (--stopped: those stopped stay stopped); a program started here and held by gdb (symbolic commands) goes back to the native monitor, stopped",
    },
    Command {
        name: "top",
        usage: "top [IDS]",
        about: "process metrics over the ranks: min, mean, max, sum and where the extremes are",
    },
    Command {
        name: "counters",
        usage: "counters [--groups] [IDS]",
        about: "the programs' own counters: min, mean, max and sum; --groups: ranks with identical counters",
    },
    Command {
        name: "health",
        usage: "health [-v]",
        about: "the tree's health per subtree (full, degraded, partial, lost); -v: per link RTT, bytes, frames, queue, credit, filter time, re-attachments",
    },
    Command {
        name: "omis",
        usage: "omis REQUEST",
        about: "send a raw OMIS request, e.g. `omis 1 [0-3] stack_backtrace()`, and print the raw replies",
    },
    Command {
        name: "sleep",
        usage: "sleep SECONDS",
        about: "wait, printing the programs' output and events meanwhile",
    },
    Command {
        name: "history",
        usage: "history",
        about: "the commands typed so far",
    },
    Command {
        name: "help",
        usage: "help [COMMAND]",
        about: "list the commands, or say how to use one",
    },
    Command {
        name: "quit",
        usage: "quit",
        about: "end the session (also `exit`); programs started are killed, processes attached to are detached",
    },
];

/// `help` (every command with what it does) or `help COMMAND` (its usage too).
pub fn help(topic: &str) -> anyhow::Result<String> {
    let topic = topic.trim();
    if topic.is_empty() {
        let width = COMMANDS.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut s = String::from(
            "Commands (IDS: ranks such as 2, 0-3,7 or [0-3,7], group names, a | b, a & b, a - b; default the focus, all ranks without one):\n",
        );
        for c in COMMANDS {
            s += &format!("  {:<width$}  {}\n", c.name, c.about);
        }
        s += "Ctrl-C at the prompt stops the programs; `help COMMAND` says more.\n";
        return Ok(s);
    }
    let name = if topic == "exit" { "quit" } else { topic };
    COMMANDS
        .iter()
        .find(|c| c.name == name)
        .map(|c| format!("usage: {}\n{}\n", c.usage, c.about))
        .ok_or_else(|| anyhow::anyhow!("help: no command {topic:?} (`help` lists them)"))
}

/// One breakpoint set by the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breakpoint {
    /// Its number, from 1, never reused.
    pub number: u32,
    /// Where: the function name or `0x` address as given.
    pub location: String,
    /// The ranks it is set on.
    pub ranks: IdSet,
}

/// What the console's commands keep between commands.
#[derive(Debug, Default)]
pub struct State {
    /// The breakpoints, by number.
    pub breakpoints: Vec<Breakpoint>,
    last_number: u32,
    /// The program started (its path on the front-end), for completion of function names.
    pub program: Option<String>,
}

impl State {
    /// The breakpoint at `location` (adding `ranks` to it), or a new one numbered next.
    pub fn add_breakpoint(&mut self, location: &str, ranks: &IdSet) -> u32 {
        if let Some(b) = self.breakpoints.iter_mut().find(|b| b.location == location) {
            b.ranks.union_with(ranks);
            return b.number;
        }
        self.last_number += 1;
        self.breakpoints.push(Breakpoint {
            number: self.last_number,
            location: location.to_owned(),
            ranks: ranks.clone(),
        });
        self.last_number
    }

    /// The number of the breakpoint at `location`, if the console set one there.
    pub fn breakpoint_number(&self, location: &str) -> Option<u32> {
        self.breakpoints
            .iter()
            .find(|b| b.location == location)
            .map(|b| b.number)
    }

    /// Takes `ranks` off breakpoint `number`; it goes when no rank is left.
    pub fn remove_ranks(&mut self, number: u32, ranks: &IdSet) {
        for b in &mut self.breakpoints {
            if b.number == number {
                b.ranks = &b.ranks - ranks;
            }
        }
        self.breakpoints.retain(|b| !b.ranks.is_empty());
    }

    /// `info break` as a table.
    pub fn breakpoint_table(&self) -> String {
        if self.breakpoints.is_empty() {
            return "No breakpoints.\n".into();
        }
        let width = self
            .breakpoints
            .iter()
            .map(|b| b.location.len())
            .max()
            .unwrap_or(0)
            .max("Location".len());
        let mut s = format!("{:<4} {:<width$}  Ranks\n", "Num", "Location");
        for b in &self.breakpoints {
            s += &format!("{:<4} {:<width$}  {}\n", b.number, b.location, b.ranks);
        }
        s
    }
}

/// The names of the functions defined in the ELF file at `path` (sorted, no duplicates);
/// empty if it cannot be read.
pub fn function_names(path: &Path) -> Vec<String> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return Vec::new();
    };
    let mut names: Vec<String> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Completions of the word at `pos` in `line`: command names for the first word, function
/// names for the argument of `break`, `help`'s topics. Returns where the word starts.
pub fn complete(line: &str, pos: usize, functions: &[String]) -> (usize, Vec<String>) {
    let before = &line[..pos];
    let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
    let word = &before[start..];
    let words: Vec<&str> = before[..start].split_whitespace().collect();
    let pick = |names: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        names
            .filter(|n| n.starts_with(word))
            .map(str::to_owned)
            .collect()
    };
    let found = match words.as_slice() {
        [] => pick(&mut COMMANDS.iter().map(|c| c.name)),
        ["help"] => pick(&mut COMMANDS.iter().map(|c| c.name)),
        ["break"] => pick(&mut functions.iter().map(String::as_str)),
        ["info"] => pick(&mut ["break"].into_iter()),
        _ => Vec::new(),
    };
    (start, found)
}

/// The interactive console's helper for rustyline: tab completion (see [`complete`]).
#[derive(Debug, Default)]
pub struct Completion {
    /// Function names of the program, for `break`.
    pub functions: Vec<String>,
}

impl rustyline::completion::Completer for Completion {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok(complete(line, pos, &self.functions))
    }
}

impl rustyline::hint::Hinter for Completion {
    type Hint = String;
}

impl rustyline::highlight::Highlighter for Completion {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        Cow::Borrowed(line)
    }
}

impl rustyline::validate::Validator for Completion {}

impl rustyline::Helper for Completion {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_command_and_explains_each() {
        let all = help("").unwrap();
        for c in COMMANDS {
            assert!(all.contains(&format!("  {}", c.name)), "{}: {all}", c.name);
            let one = help(c.name).unwrap();
            assert!(one.starts_with(&format!("usage: {}\n", c.usage)), "{one}");
            assert!(one.contains(c.about), "{one}");
        }
        assert!(
            help("nosuch")
                .unwrap_err()
                .to_string()
                .contains("no command \"nosuch\"")
        );
    }

    #[test]
    fn completion_of_commands_functions_and_topics() {
        let f = vec![
            "main".to_owned(),
            "reached_by_odd".to_owned(),
            "spin".to_owned(),
        ];
        assert_eq!(
            complete("co", 2, &f),
            (0, vec!["cont".into(), "continue".into(), "counters".into()])
        );
        assert_eq!(
            complete("break re", 8, &f),
            (6, vec!["reached_by_odd".into()])
        );
        assert_eq!(complete("break ", 6, &f).1.len(), 3);
        assert_eq!(
            complete("help de", 7, &f),
            (5, vec!["delete".into(), "detach".into()])
        );
        assert_eq!(complete("info b", 6, &f), (5, vec!["break".into()]));
        assert!(complete("stop 0-", 7, &f).1.is_empty());
    }

    #[test]
    fn breakpoints_are_numbered_once_and_go_with_their_last_rank() {
        let mut s = State::default();
        assert_eq!(s.add_breakpoint("tick", &IdSet::all(2)), 1);
        assert_eq!(s.add_breakpoint("0x1000", &IdSet::single(3)), 2);
        assert_eq!(s.add_breakpoint("tick", &IdSet::single(5)), 1);
        assert_eq!(s.breakpoints[0].ranks.to_string(), "[0-1,5]");
        assert_eq!(s.breakpoint_number("0x1000"), Some(2));
        s.remove_ranks(2, &IdSet::single(3));
        assert_eq!(s.breakpoint_number("0x1000"), None);
        assert_eq!(
            s.add_breakpoint("0x1000", &IdSet::single(3)),
            3,
            "never reused"
        );
        let t = s.breakpoint_table();
        assert!(t.starts_with("Num  Location  Ranks\n"), "{t}");
        assert!(t.contains("1    tick      [0-1,5]\n"), "{t}");
    }

    #[test]
    fn function_names_come_from_the_symbol_table() {
        let me = std::env::current_exe().unwrap();
        let names = function_names(&me);
        assert!(names.iter().any(|n| n == "main"), "{} names", names.len());
        assert!(function_names(Path::new("/nonexistent")).is_empty());
    }
}
