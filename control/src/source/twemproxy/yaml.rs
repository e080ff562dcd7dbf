//! A nutcracker.yml as a tree of text scalars, lists and ordered maps, each node with its
//! 1-based line (yaml-rust2's event parser), so an error can name the line it is about.
//!
//! Scalars stay text whatever their YAML type: twemproxy reads every value as a string
//! (libyaml scalars, `src/nc_conf.c`), so `"true"` and `true`, `"400"` and `400` mean the same
//! there and must here.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// One YAML node and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// 1-based line.
    pub line: usize,
    /// What it holds.
    pub value: Value,
}

/// A node's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar's text as written (unquoted); `~`/empty are text too.
    Scalar(String),
    /// A list.
    Seq(Vec<Node>),
    /// A map in file order: (key, the key's line, value).
    Map(Vec<(String, usize, Node)>),
}

impl Node {
    /// The scalar's text, or None for a list or map.
    pub fn text(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) => Some(s),
            _ => None,
        }
    }
}

/// Parses one YAML document; an empty file is an empty map.
///
/// Errors: YAML syntax (with line and column), a second document, a list or map used as a map
/// key, a duplicate key, an alias to an unknown anchor (each with its line).
pub fn parse(text: &str) -> Result<Node, String> {
    let mut b = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut b, true).map_err(|e| e.to_string())?;
    if let Some(e) = b.error {
        return Err(e);
    }
    match b.docs.len() {
        0 => Ok(Node {
            line: 1,
            value: Value::Map(Vec::new()),
        }),
        1 => Ok(b.docs.swap_remove(0)),
        n => Err(format!("{n} YAML documents; a nutcracker.yml is one")),
    }
}

enum Frame {
    Seq(usize, usize, Vec<Node>),
    /// Anchor, line, entries, and the pending key with its line.
    Map(
        usize,
        usize,
        Vec<(String, usize, Node)>,
        Option<(String, usize)>,
    ),
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    docs: Vec<Node>,
    anchors: std::collections::HashMap<usize, Node>,
    error: Option<String>,
}

impl Builder {
    fn push(&mut self, node: Node) -> Result<(), String> {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq(_, _, items)) => items.push(node),
            Some(Frame::Map(_, _, entries, key)) => match key.take() {
                Some((k, kline)) => entries.push((k, kline, node)),
                None => {
                    let Value::Scalar(k) = node.value else {
                        return Err(format!("line {}: a map key must be a scalar", node.line));
                    };
                    if entries.iter().any(|(e, _, _)| *e == k) {
                        return Err(format!("line {}: duplicate key \"{k}\"", node.line));
                    }
                    *key = Some((k, node.line));
                }
            },
        }
        Ok(())
    }

    fn event(&mut self, ev: Event, mark: Marker) -> Result<(), String> {
        let line = mark.line();
        match ev {
            Event::SequenceStart(anchor, _) => {
                self.stack.push(Frame::Seq(anchor, line, Vec::new()))
            }
            Event::MappingStart(anchor, _) => {
                self.stack.push(Frame::Map(anchor, line, Vec::new(), None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (anchor, node) = match self.stack.pop() {
                    Some(Frame::Seq(a, line, items)) => (
                        a,
                        Node {
                            line,
                            value: Value::Seq(items),
                        },
                    ),
                    Some(Frame::Map(a, line, entries, _)) => (
                        a,
                        Node {
                            line,
                            value: Value::Map(entries),
                        },
                    ),
                    None => return Err(format!("line {line}: unbalanced YAML")),
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push(node)?;
            }
            Event::Scalar(text, _, anchor, _) => {
                let node = Node {
                    line,
                    value: Value::Scalar(text),
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push(node)?;
            }
            Event::Alias(id) => {
                let mut node = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| format!("line {line}: unknown alias"))?;
                node.line = line;
                self.push(node)?;
            }
            _ => {}
        }
        Ok(())
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_none()
            && let Err(e) = self.event(ev, mark)
        {
            self.error = Some(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_text_and_lines() {
        let n = parse("b:\n  x: 1\n  l:\n   - \"a b\"\n   - true\na: ~\n").unwrap();
        let Value::Map(top) = &n.value else { panic!() };
        assert_eq!(top[0].0, "b");
        assert_eq!(top[0].1, 1);
        assert_eq!(top[1].0, "a");
        assert_eq!(top[1].1, 6);
        assert_eq!(top[1].2.text(), Some("~"));
        let Value::Map(b) = &top[0].2.value else {
            panic!()
        };
        assert_eq!(b[0].2.text(), Some("1"));
        assert_eq!(b[0].1, 2);
        let Value::Seq(l) = &b[1].2.value else {
            panic!()
        };
        assert_eq!(l[0].text(), Some("a b"));
        assert_eq!(l[0].line, 4);
        assert_eq!(l[1].text(), Some("true"));
        assert_eq!(l[1].line, 5);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            parse("a: 1\na: 2\n").unwrap_err(),
            "line 2: duplicate key \"a\""
        );
        assert!(parse("a: [1\n").is_err());
        assert!(
            parse("a: 1\n---\nb: 2\n")
                .unwrap_err()
                .contains("2 YAML documents")
        );
        assert_eq!(parse("").unwrap().value, Value::Map(Vec::new()));
    }
}
