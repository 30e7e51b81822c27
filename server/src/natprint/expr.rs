//! The expressions the native evaluator takes: an identifier, then postfix `.member`,
//! `->member` and `[integer]`, under any number of prefix `*`. Anything else (casts,
//! arithmetic, calls, registers, `&`) is not native: the caller hands it to gdb.

use super::NotNative;

/// One step applied to a value, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `.name`
    Member(String),
    /// `->name`
    Arrow(String),
    /// `[n]`
    Index(i64),
    /// Prefix `*`.
    Deref,
}

/// A parsed expression: the variable's name and the steps applied to it in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expr {
    pub(crate) name: String,
    pub(crate) steps: Vec<Step>,
}

/// Parses `text`; anything outside the supported forms is [`NotNative::Syntax`].
pub(crate) fn parse(text: &str) -> Result<Expr, NotNative> {
    let s = text.trim();
    let derefs = s
        .chars()
        .take_while(|c| *c == '*' || c.is_whitespace())
        .count();
    let stars = s[..derefs].chars().filter(|c| *c == '*').count();
    let mut rest = s[derefs..].trim_start();
    let name = ident(&mut rest).ok_or(NotNative::Syntax)?;
    let mut steps = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(r) = rest.strip_prefix("->") {
            rest = r.trim_start();
            steps.push(Step::Arrow(ident(&mut rest).ok_or(NotNative::Syntax)?));
        } else if let Some(r) = rest.strip_prefix('.') {
            rest = r.trim_start();
            steps.push(Step::Member(ident(&mut rest).ok_or(NotNative::Syntax)?));
        } else if let Some(r) = rest.strip_prefix('[') {
            let (inside, after) = r.split_once(']').ok_or(NotNative::Syntax)?;
            steps.push(Step::Index(integer(inside.trim())?));
            rest = after;
        } else {
            return Err(NotNative::Syntax);
        }
    }
    steps.extend(std::iter::repeat_n(Step::Deref, stars));
    Ok(Expr { name, steps })
}

/// A C identifier at the start of `s` (not a keyword gdb gives a meaning); advances `s`.
fn ident(s: &mut &str) -> Option<String> {
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
        .map_or(s.len(), |(i, _)| i);
    let word = &s[..end];
    let first = word.chars().next()?;
    if first.is_ascii_digit() || KEYWORDS.contains(&word) {
        return None;
    }
    *s = &s[end..];
    Some(word.to_owned())
}

/// Words gdb's C parser treats as keywords or operators, never as a variable.
const KEYWORDS: &[&str] = &[
    "sizeof",
    "alignof",
    "_Alignof",
    "struct",
    "union",
    "enum",
    "unsigned",
    "signed",
    "int",
    "char",
    "long",
    "short",
    "float",
    "double",
    "void",
    "const",
    "volatile",
    "true",
    "false",
    "class",
    "template",
    "typeof",
    "__typeof__",
    "__typeof",
    "decltype",
    "operator",
    "new",
    "delete",
    "this",
    "sizeof__",
    "_Bool",
    "bool",
    "restrict",
    "__restrict",
];

/// A decimal index (gdb's other spellings, hex or octal or negative, go to gdb).
fn integer(s: &str) -> Result<i64, NotNative> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return Err(NotNative::Syntax);
    }
    s.parse().map_err(|_| NotNative::Syntax)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let e = parse(" *r->in.pair[1] ").unwrap();
        assert_eq!(e.name, "r");
        assert_eq!(
            e.steps,
            [
                Step::Arrow("in".into()),
                Step::Member("pair".into()),
                Step::Index(1),
                Step::Deref
            ]
        );
        assert_eq!(parse("rank").unwrap().steps, []);
        for bad in [
            "rank + 1", "$rip", "(int)x", "f()", "&x", "a[i]", "a[0x1]", "1", "sizeof x", "",
        ] {
            assert_eq!(parse(bad), Err(NotNative::Syntax), "{bad}");
        }
    }
}
