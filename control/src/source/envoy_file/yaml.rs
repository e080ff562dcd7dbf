//! YAML → `serde_json::Value` (yaml-rust2's event parser), with the line of every key and list
//! item so a mapping error can name the line it is on.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::reader::join;

/// Path (as [`super::reader`] writes them: `a.b[2].c`) → 1-based line.
pub type Lines = HashMap<String, usize>;

/// Parses one YAML document.
///
/// Errors: YAML syntax (with line and column), a second document, a non-string key, a tagged or
/// unparsable scalar (with line).
pub fn parse(text: &str) -> Result<(Value, Lines), String> {
    let mut b = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut b, true).map_err(|e| e.to_string())?;
    if let Some(e) = b.error {
        return Err(e);
    }
    match b.docs.len() {
        0 => Ok((Value::Null, b.lines)),
        1 => Ok((b.docs.swap_remove(0), b.lines)),
        n => Err(format!("{n} YAML documents; an Envoy bootstrap is one")),
    }
}

enum Frame {
    Seq {
        items: Vec<Value>,
        path: String,
        anchor: usize,
    },
    Map {
        map: Map<String, Value>,
        key: Option<String>,
        path: String,
        anchor: usize,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    docs: Vec<Value>,
    anchors: HashMap<usize, Value>,
    lines: Lines,
    error: Option<String>,
}

impl Builder {
    /// The path of the node that starts now (a map key's value or the next list item); `None`
    /// when the node is a map key.
    fn next_path(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame::Seq { items, path, .. }) => Some(format!("{path}[{}]", items.len())),
            Some(Frame::Map { key: None, .. }) => None,
            Some(Frame::Map {
                key: Some(k), path, ..
            }) => Some(join(path, k)),
        }
    }

    /// Adds a finished node to its parent (or as a document).
    fn push(&mut self, v: Value, mark: Marker) -> Result<(), String> {
        match self.stack.last_mut() {
            None => self.docs.push(v),
            Some(Frame::Seq { items, .. }) => items.push(v),
            Some(Frame::Map { map, key, path, .. }) => match key.take() {
                Some(k) => {
                    map.insert(k, v);
                }
                None => {
                    let k = match v {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => {
                            return Err(format!(
                                "line {}: a map key must be a string",
                                mark.line()
                            ));
                        }
                    };
                    if map.contains_key(&k) {
                        return Err(format!("line {}: duplicate key \"{k}\"", mark.line()));
                    }
                    self.lines.entry(join(path, &k)).or_insert(mark.line());
                    *key = Some(k);
                }
            },
        }
        Ok(())
    }

    fn event(&mut self, ev: Event, mark: Marker) -> Result<(), String> {
        match ev {
            Event::SequenceStart(anchor, _) => {
                let path = self.start(mark);
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    path,
                    anchor,
                });
            }
            Event::MappingStart(anchor, _) => {
                let path = self.start(mark);
                self.stack.push(Frame::Map {
                    map: Map::new(),
                    key: None,
                    path,
                    anchor,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (v, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { items, anchor, .. }) => (Value::Array(items), anchor),
                    Some(Frame::Map { map, anchor, .. }) => (Value::Object(map), anchor),
                    None => return Err(format!("line {}: unbalanced YAML", mark.line())),
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, v.clone());
                }
                self.push(v, mark)?;
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.start(mark);
                if tag.is_some() {
                    return Err(format!(
                        "line {}: YAML tags are not supported (\"{text}\")",
                        mark.line()
                    ));
                }
                let v = scalar(text, style).map_err(|e| format!("line {}: {e}", mark.line()))?;
                if anchor > 0 {
                    self.anchors.insert(anchor, v.clone());
                }
                self.push(v, mark)?;
            }
            Event::Alias(id) => {
                self.start(mark);
                let v = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| format!("line {}: unknown alias", mark.line()))?;
                self.push(v, mark)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Records the line of a list item (map values are recorded at their key) and returns its
    /// path.
    fn start(&mut self, mark: Marker) -> String {
        let path = self.next_path().unwrap_or_default();
        if matches!(self.stack.last(), Some(Frame::Seq { .. })) {
            self.lines.entry(path.clone()).or_insert(mark.line());
        }
        path
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

/// A scalar as YAML 1.2 core schema resolves it (plain scalars only are typed).
fn scalar(text: String, style: TScalarStyle) -> Result<Value, String> {
    if style != TScalarStyle::Plain {
        return Ok(Value::String(text));
    }
    Ok(match Yaml::from_str(&text) {
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => match r.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Value::Number(n),
            // .inf / .nan have no JSON form; keep the text for the field to judge.
            None => Value::String(r),
        },
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Null => Value::Null,
        Yaml::String(s) => Value::String(s),
        _ => return Err(format!("cannot read scalar \"{text}\"")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_and_records_lines() {
        let text = "a:\n  b: 1\n  c: [x, \"2\"]\nl:\n- k: true\n- k: 0.5\n  n: ~\n";
        let (v, lines) = parse(text).unwrap();
        assert_eq!(
            v,
            json!({"a": {"b": 1, "c": ["x", "2"]}, "l": [{"k": true}, {"k": 0.5, "n": null}]})
        );
        assert_eq!(lines.get("a.b"), Some(&2));
        assert_eq!(lines.get("a.c"), Some(&3));
        assert_eq!(lines.get("l[1]"), Some(&6));
        assert_eq!(lines.get("l[1].n"), Some(&7));
    }

    #[test]
    fn anchors_are_resolved() {
        let (v, _) = parse("x: &t {a: 1}\ny: *t\n").unwrap();
        assert_eq!(v, json!({"x": {"a": 1}, "y": {"a": 1}}));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("a: 1\nb: [1\n").unwrap_err();
        assert!(e.contains("line 3") || e.contains("line 2"), "{e}");
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e, "line 2: duplicate key \"a\"");
        assert!(
            parse("a: 1\n---\nb: 2\n")
                .unwrap_err()
                .contains("2 YAML documents")
        );
    }
}
