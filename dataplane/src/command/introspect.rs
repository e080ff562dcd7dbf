//! `COMMAND` and its subcommands, answered from the table in Redis 7.0's reply shapes
//! (`server.c` `commandCommand`, `commandInfoCommand`, `commandDocsCommand`,
//! `commandListCommand`, `commandGetKeysCommand`). Key specs and docs are Redis 7.0.15's own
//! bytes ([`super::table_raw`]); only the order of subcommands may differ from Redis's (a dict).

use super::table::{INFO, Info};
use super::table_raw::{DOCS, KEY_SPECS};
use super::{COMMANDS, CommandSpec, is_container, lookup, lookup_fullname, subcommand};
use crate::resp::encode;

fn info(spec: &CommandSpec) -> &'static Info {
    INFO.get(usize::from(spec.id)).unwrap_or(&Info {
        flags: &[],
        acl: &[],
        tips: &[],
        range: (0, 0, 0),
        summary: "",
        since: "",
        group: "",
    })
}

fn top_level() -> impl Iterator<Item = &'static CommandSpec> {
    COMMANDS.iter().filter(|c| !c.name.contains('|'))
}

fn subcommands(spec: &CommandSpec) -> impl Iterator<Item = &'static CommandSpec> + use<> {
    let name = spec.name;
    let container = is_container(spec);
    COMMANDS.iter().filter(move |c| {
        container
            && c.name.len() > name.len() + 1
            && c.name.starts_with(name)
            && c.name.as_bytes().get(name.len()) == Some(&b'|')
    })
}

fn statuses(out: &mut Vec<u8>, items: &[&str]) {
    encode::array_header(out, items.len());
    for s in items {
        encode::simple(out, s.as_bytes());
    }
}

/// One `COMMAND INFO` entry (10 elements).
fn command_info(out: &mut Vec<u8>, spec: &CommandSpec) {
    let i = info(spec);
    encode::array_header(out, 10);
    encode::bulk(out, spec.name.as_bytes());
    encode::integer(out, i64::from(spec.arity));
    statuses(out, i.flags);
    encode::integer(out, i64::from(i.range.0));
    encode::integer(out, i64::from(i.range.1));
    encode::integer(out, i64::from(i.range.2));
    statuses(out, i.acl);
    encode::array_header(out, i.tips.len());
    for t in i.tips {
        encode::bulk(out, t.as_bytes());
    }
    match KEY_SPECS.get(usize::from(spec.id)) {
        Some(raw) => out.extend_from_slice(raw),
        None => encode::array_header(out, 0),
    }
    let subs: Vec<_> = subcommands(spec).collect();
    encode::array_header(out, subs.len());
    for s in subs {
        command_info(out, s);
    }
}

/// One `COMMAND DOCS` value: Redis's own docs map; without it, `summary`, `since`, `group`
/// (+ `subcommands`) as a flat map.
fn command_docs(out: &mut Vec<u8>, spec: &CommandSpec) {
    if let Some(raw) = DOCS.get(usize::from(spec.id)) {
        return out.extend_from_slice(raw);
    }
    let i = info(spec);
    let subs: Vec<_> = subcommands(spec).collect();
    encode::array_header(out, if subs.is_empty() { 6 } else { 8 });
    for (k, v) in [
        ("summary", i.summary),
        ("since", i.since),
        ("group", i.group),
    ] {
        encode::bulk(out, k.as_bytes());
        encode::bulk(out, v.as_bytes());
    }
    if !subs.is_empty() {
        encode::bulk(out, b"subcommands");
        encode::array_header(out, subs.len() * 2);
        for s in subs {
            encode::bulk(out, s.name.as_bytes());
            command_docs(out, s);
        }
    }
}

fn error(out: &mut Vec<u8>, msg: &[u8]) {
    encode::error(out, msg);
}

/// Redis `stringmatchlen` (glob: `*`, `?`, `[...]` with `^` and ranges, `\` escapes).
pub(super) fn glob(p: &[u8], s: &[u8], nocase: bool) -> bool {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            (0..=s.len()).any(|k| glob(rest, s.get(k..).unwrap_or_default(), nocase))
        }
        Some((b'?', rest)) => s
            .split_first()
            .is_some_and(|(_, st)| glob(rest, st, nocase)),
        Some((b'[', rest)) => {
            let Some((&c, st)) = s.split_first() else {
                return false;
            };
            let (not, mut q) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut matched = false;
            loop {
                match q {
                    [] => break,
                    [b']', r @ ..] => {
                        q = r;
                        break;
                    }
                    [b'\\', x, r @ ..] => {
                        matched |= eq(*x, c);
                        q = r;
                    }
                    [a, b'-', b, r @ ..] if *b != b']' => {
                        let (lo, hi) = if a <= b { (*a, *b) } else { (*b, *a) };
                        let (lo, hi, cc) = if nocase {
                            (
                                lo.to_ascii_lowercase(),
                                hi.to_ascii_lowercase(),
                                c.to_ascii_lowercase(),
                            )
                        } else {
                            (lo, hi, c)
                        };
                        matched |= (lo..=hi).contains(&cc);
                        q = r;
                    }
                    [x, r @ ..] => {
                        matched |= eq(*x, c);
                        q = r;
                    }
                }
            }
            matched != not && glob(q, st, nocase)
        }
        Some((b'\\', [x, rest @ ..])) => s
            .split_first()
            .is_some_and(|(c, st)| eq(*x, *c) && glob(rest, st, nocase)),
        Some((x, rest)) => s
            .split_first()
            .is_some_and(|(c, st)| eq(*x, *c) && glob(rest, st, nocase)),
    }
}

pub(super) fn command_reply<'a>(argc: usize, arg: &impl Fn(usize) -> &'a [u8], out: &mut Vec<u8>) {
    if argc < 2 {
        let all: Vec<_> = top_level().collect();
        encode::array_header(out, all.len());
        for c in all {
            command_info(out, c);
        }
        return;
    }
    let sub = arg(1);
    let is = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    if is(b"count") {
        encode::integer(out, top_level().count() as i64);
    } else if is(b"info") {
        if argc == 2 {
            return command_reply(1, arg, out);
        }
        encode::array_header(out, argc - 2);
        for i in 2..argc {
            match lookup_fullname(arg(i)) {
                Some(c) => command_info(out, c),
                None => encode::nil(out),
            }
        }
    } else if is(b"docs") {
        let found: Vec<_> = if argc == 2 {
            top_level().collect()
        } else {
            (2..argc).filter_map(|i| lookup_fullname(arg(i))).collect()
        };
        encode::array_header(out, found.len() * 2);
        for c in found {
            encode::bulk(out, c.name.as_bytes());
            command_docs(out, c);
        }
    } else if is(b"list") {
        let filter: Box<dyn Fn(&CommandSpec) -> bool> = match argc {
            2 => Box::new(|_| true),
            5 if arg(2).eq_ignore_ascii_case(b"filterby") => {
                let (kind, value) = (arg(3), arg(4));
                if kind.eq_ignore_ascii_case(b"module") {
                    Box::new(|_| false)
                } else if kind.eq_ignore_ascii_case(b"aclcat") {
                    Box::new(move |c| {
                        info(c).acl.iter().any(|a| {
                            a.strip_prefix('@')
                                .is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(value))
                        })
                    })
                } else if kind.eq_ignore_ascii_case(b"pattern") {
                    Box::new(move |c| glob(value, c.name.as_bytes(), true))
                } else {
                    return error(out, b"ERR syntax error");
                }
            }
            _ => return error(out, b"ERR syntax error"),
        };
        let names: Vec<_> = COMMANDS.iter().filter(|c| filter(c)).collect();
        encode::array_header(out, names.len());
        for c in names {
            encode::bulk(out, c.name.as_bytes());
        }
    } else if is(b"getkeys") {
        getkeys(argc, arg, out);
    } else {
        out.extend_from_slice(&super::unknown_subcommand_error(arg(0), sub));
    }
}

/// `COMMAND GETKEYS cmd args…` (server.c `getKeysSubcommandImpl`).
fn getkeys<'a>(argc: usize, arg: &impl Fn(usize) -> &'a [u8], out: &mut Vec<u8>) {
    if argc < 3 {
        return out.extend_from_slice(
            b"-ERR wrong number of arguments for 'command|getkeys' command\r\n",
        );
    }
    let n = argc - 2;
    let shifted = |i: usize| arg(i + 2);
    let spec = match lookup(arg(2)) {
        Some(c) if n >= 2 && is_container(c) => subcommand(c, arg(3)),
        other => other,
    };
    let Some(spec) = spec else {
        return error(out, b"ERR Invalid command specified");
    };
    let i = info(spec);
    if i.range.0 <= 0 && !i.flags.contains(&"movablekeys") {
        return error(out, b"ERR The command has no key arguments");
    }
    let arity = i64::from(spec.arity);
    if (arity > 0 && arity != n as i64) || (n as i64) < -arity {
        return error(
            out,
            b"ERR Invalid number of arguments specified for command",
        );
    }
    let mut keys = Vec::new();
    let ok = super::keys(spec, n, shifted, &mut keys).is_ok() && !keys.is_empty();
    if !ok {
        if i.flags.contains(&"no_mandatory_keys") {
            encode::array_header(out, 0);
        } else {
            error(out, b"ERR Invalid arguments specified for command");
        }
        return;
    }
    encode::array_header(out, keys.len());
    for k in keys {
        encode::bulk(out, shifted(k));
    }
}
