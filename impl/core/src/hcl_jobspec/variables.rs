//! HCL2 input variables and locals, as Nomad's jobspec2 reads them.
//!
//! * `variable "<name>" { type default description sensitive nullable }` declares one;
//!   `var.<name>` reads it.
//! * Its value, each source over the one before (Nomad's precedence): the `default`, the
//!   environment's `NOMAD_VAR_<name>`, each `-var-file` in order, each `-var name=value` in
//!   order. A variable left with no value is an error naming it; a `-var` or a var-file
//!   entry for an undeclared variable is an error; an environment variable for one is
//!   ignored (the environment holds what it holds).
//! * `type` is `string`, `number`, `bool`, `any`, or `list(T)`, `set(T)`, `map(T)` of those.
//!   A value is converted to it as Nomad's (cty's) conversions do: a number or a bool to a
//!   string, a string such as `"2"` or `"true"` to a number or a bool; anything else that
//!   does not fit is an error. `-var` and environment values are strings, converted so; for
//!   a list or a map they are read as an HCL expression.
//! * `locals { name = expression }` blocks define locals, `local.<name>` reads them; each
//!   is evaluated after the locals it names, wherever those are defined (dependency
//!   order, as HCL2's), and a cycle among them is an error naming them.
//!
//! Bounds: [`MAX_VARIABLES`] declarations, locals and `-var` flags each (so a chain of
//! locals is at most that deep, and is walked without recursion), [`MAX_VAR_FILES`]
//! var-files of at most [`crate::spec::MAX_SUBMISSION_BYTES`] each (the most a job's source
//! may be), and the expansion bound of `values.rs`.

use super::error::{Error, Input, Problem};
use super::values::{kind_of, local_references, value, Scope};
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Attribute, Block, Body};
use hcl::edit::Span;
use serde_json::{Map, Value};

/// The most variables a jobspec may declare, locals it may define, and `-var` flags given.
pub const MAX_VARIABLES: usize = 256;
/// The most var-files read for one jobspec.
pub const MAX_VAR_FILES: usize = 16;

/// Where variables' values come from besides their defaults.
#[derive(Debug, Clone, Default)]
pub struct VariableInputs<'a> {
    /// `-var-file`s (or the HTTP API's `Variables`), in the order given.
    pub files: Vec<Input<'a>>,
    /// `-var name=value` flags, in the order given (see [`var_flag`]).
    pub flags: Vec<(String, String)>,
    /// The environment's `NOMAD_VAR_<name>` values, named without the prefix.
    pub env: Vec<(String, String)>,
}

/// A `-var` flag's `name=value`.
pub fn var_flag(flag: &str) -> Result<(String, String), String> {
    match flag.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.to_string()))
        }
        _ => Err(format!(
            "-var {flag:?}: a variable is given as name=value (e.g. -var 'count=2')"
        )),
    }
}

/// A declared variable's type constraint.
#[derive(Debug, Clone, PartialEq)]
enum Type {
    Any,
    String,
    Number,
    Bool,
    List(Box<Type>),
    Map(Box<Type>),
}

/// A `variable` block read.
struct Declaration {
    ty: Type,
    /// The value so far: the default, then each source over it.
    value: Option<Value>,
}

/// The variables' values: declarations from `variable` blocks, then each source over them.
pub(super) fn resolve(
    jobspec: &Input,
    declarations: &[&Block],
    inputs: &VariableInputs,
) -> Result<Map<String, Value>, Error> {
    let in_jobspec = |problem| Error::in_input(jobspec, problem);
    if declarations.len() > MAX_VARIABLES {
        return Err(in_jobspec(Problem::at(
            declarations[MAX_VARIABLES].span(),
            format!("more than {MAX_VARIABLES} variable blocks"),
        )));
    }
    let mut read = std::collections::BTreeMap::new();
    let mut in_order = Vec::with_capacity(declarations.len());
    for block in declarations {
        let (name, declaration) = declaration(jobspec.text, block).map_err(in_jobspec)?;
        if read.contains_key(&name) {
            return Err(in_jobspec(Problem::at(
                block.ident.span(),
                format!("variable {name:?} is declared twice"),
            )));
        }
        in_order.push((name.clone(), block.ident.span()));
        read.insert(name, declaration);
    }
    for (name, text) in &inputs.env {
        // Nomad ignores the environment's values for variables the jobspec does not declare.
        if let Some(declaration) = read.get_mut(name) {
            let converted = from_text(&declaration.ty, text).map_err(|why| {
                Error::unplaced(Problem::nowhere(format!(
                    "NOMAD_VAR_{name}: invalid value for variable {name:?}: {why}"
                )))
            })?;
            declaration.value = Some(converted);
        }
    }
    if inputs.files.len() > MAX_VAR_FILES {
        return Err(Error::unplaced(Problem::nowhere(format!(
            "more than {MAX_VAR_FILES} var-files"
        ))));
    }
    for file in &inputs.files {
        var_file(file, &mut read).map_err(|problem| Error::in_input(file, problem))?;
    }
    if inputs.flags.len() > MAX_VARIABLES {
        return Err(Error::unplaced(Problem::nowhere(format!(
            "more than {MAX_VARIABLES} -var flags"
        ))));
    }
    for (name, text) in &inputs.flags {
        let Some(declaration) = read.get_mut(name) else {
            return Err(Error::unplaced(Problem::nowhere(format!(
                "-var {name:?}: no variable {name:?} is declared in the jobspec \
                 (declare it: variable {name:?} {{}})"
            ))));
        };
        let converted = from_text(&declaration.ty, text).map_err(|why| {
            Error::unplaced(Problem::nowhere(format!(
                "-var {name:?}: invalid value for variable {name:?}: {why}"
            )))
        })?;
        declaration.value = Some(converted);
    }
    let mut values = Map::new();
    for (name, span) in in_order {
        let Some(value) = read.remove(&name).and_then(|declaration| declaration.value) else {
            return Err(in_jobspec(Problem::at(
                span,
                format!(
                    "Required variable {name:?} is not set: give it a default, -var \
                     '{name}=…', a -var-file, or NOMAD_VAR_{name}"
                ),
            )));
        };
        values.insert(name, value);
    }
    Ok(values)
}

/// A `variable "<name>" { … }` block.
fn declaration(source: &str, block: &Block) -> Result<(String, Declaration), Problem> {
    let name = match block.labels.as_slice() {
        [label] if !label.as_str().is_empty() => label.as_str().to_string(),
        _ => {
            return Err(Problem::at(
                block.ident.span(),
                "a variable block needs exactly one label (its name)",
            ))
        }
    };
    let at = format!("variable {name:?}");
    let literal = Scope::literal(source);
    let mut ty = Type::Any;
    let mut default = None;
    for attribute in block.body.attributes() {
        let key = attribute.key.as_str();
        let path = format!("{at}.{key}");
        match key {
            "type" => ty = type_constraint(&attribute.value, &path)?,
            "default" => default = Some((value(&literal, &attribute.value, &path)?, attribute)),
            "description" | "sensitive" | "nullable" => {
                value(&literal, &attribute.value, &path)?;
            }
            other => {
                return Err(Problem::at(
                    attribute.key.span(),
                    format!("{at}: unsupported attribute {other:?}"),
                ))
            }
        }
    }
    if let Some(inner) = block.body.blocks().next() {
        return Err(Problem::at(
            inner.ident.span(),
            format!(
                "{at}: unsupported block {:?} (validation blocks are not supported)",
                inner.ident.as_str()
            ),
        ));
    }
    let value = match default {
        Some((given, attribute)) => Some(convert(&ty, given).map_err(|why| {
            Problem::at(
                attribute.value.span(),
                format!("{at}.default: invalid default value for variable {name:?}: {why}"),
            )
        })?),
        None => None,
    };
    Ok((name, Declaration { ty, value }))
}

/// `string`, `number`, `bool`, `any`, `list(T)`, `set(T)`, `map(T)`.
fn type_constraint(expr: &Expression, at: &str) -> Result<Type, Problem> {
    let unsupported = || {
        Problem::at(
            expr.span(),
            format!(
                "{at}: unsupported type; use string, number, bool, any, or list(T), set(T), map(T)"
            ),
        )
    };
    match expr {
        Expression::Variable(name) => match name.as_str() {
            "string" => Ok(Type::String),
            "number" => Ok(Type::Number),
            "bool" => Ok(Type::Bool),
            "any" => Ok(Type::Any),
            _ => Err(unsupported()),
        },
        Expression::FuncCall(call) if call.name.namespace.is_empty() => {
            let [element] = call.args.iter().collect::<Vec<_>>()[..] else {
                return Err(unsupported());
            };
            let element = Box::new(type_constraint(element, at)?);
            match call.name.name.as_str() {
                "list" | "set" => Ok(Type::List(element)),
                "map" => Ok(Type::Map(element)),
                _ => Err(unsupported()),
            }
        }
        _ => Err(unsupported()),
    }
}

/// A value converted to `ty`, as Nomad's conversions do; why not, if it does not fit.
fn convert(ty: &Type, given: Value) -> Result<Value, String> {
    let got = kind_of(&given);
    let required = |what: &str| format!("a {what} is required (got a {got})");
    Ok(match (ty, given) {
        (Type::Any, given) | (_, given @ Value::Null) => given,
        (Type::String, Value::String(s)) => Value::String(s),
        (Type::String, simple @ (Value::Number(_) | Value::Bool(_))) => {
            Value::String(simple.to_string())
        }
        (Type::Number, Value::Number(n)) => Value::Number(n),
        (Type::Number, Value::String(s)) => number_from(&s)
            .ok_or_else(|| format!("a number is required (got the string {:?})", clip(&s)))?,
        (Type::Bool, Value::Bool(b)) => Value::Bool(b),
        (Type::Bool, Value::String(s)) if s == "true" || s == "false" => Value::Bool(s == "true"),
        (Type::List(element), Value::Array(items)) => Value::Array(
            items
                .into_iter()
                .map(|item| convert(element, item))
                .collect::<Result<_, _>>()?,
        ),
        (Type::Map(element), Value::Object(map)) => Value::Object(
            map.into_iter()
                .map(|(k, v)| convert(element, v).map(|v| (k, v)))
                .collect::<Result<_, _>>()?,
        ),
        (Type::String, _) => return Err(required("string")),
        (Type::Number, _) => return Err(required("number")),
        (Type::Bool, _) => return Err(required("bool")),
        (Type::List(_), _) => return Err(required("list")),
        (Type::Map(_), _) => return Err(required("map")),
    })
}

/// The start of a long value, for an error.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

fn number_from(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Ok(i) = text.parse::<i64>() {
        return Some(Value::from(i));
    }
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
}

/// A `-var` or environment value (text) as the declared type: a list or a map read as an
/// HCL expression, a number or a bool converted from the text, anything else the text.
fn from_text(ty: &Type, text: &str) -> Result<Value, String> {
    match ty {
        Type::List(_) | Type::Map(_) => {
            let expr = hcl::edit::parser::parse_expr(text)
                .map_err(|e| format!("not an HCL value: {}", e.message()))?;
            let read = value(&Scope::literal(text), &expr, "the value")
                .map_err(|problem| problem.message)?;
            convert(ty, read)
        }
        _ => convert(ty, Value::String(text.to_string())),
    }
}

/// A var-file: `name = value` for declared variables, each over what came before.
fn var_file(
    file: &Input,
    read: &mut std::collections::BTreeMap<String, Declaration>,
) -> Result<(), Problem> {
    let limit = crate::spec::MAX_SUBMISSION_BYTES;
    if file.text.len() > limit {
        return Err(Problem::nowhere(format!(
            "larger than {limit} bytes, the most a var-file may be"
        )));
    }
    let body: Body = super::parse_body(file.text)?;
    if let Some(block) = body.blocks().next() {
        return Err(Problem::at(
            block.ident.span(),
            format!(
                "unexpected block {:?}: a var-file holds only name = value",
                block.ident.as_str()
            ),
        ));
    }
    let literal = Scope::literal(file.text);
    for attribute in body.attributes() {
        let name = attribute.key.as_str();
        let Some(declaration) = read.get_mut(name) else {
            return Err(Problem::at(
                attribute.key.span(),
                format!(
                    "no variable {name:?} is declared in the jobspec (declare it: variable \
                     {name:?} {{}})"
                ),
            ));
        };
        let given = value(&literal, &attribute.value, name)?;
        let converted = convert(&declaration.ty, given).map_err(|why| {
            Problem::at(
                attribute.value.span(),
                format!("invalid value for variable {name:?}: {why}"),
            )
        })?;
        declaration.value = Some(converted);
    }
    Ok(())
}

/// `locals { … }` blocks, each local evaluated after the locals it names, wherever they are
/// defined (HCL2's dependency order, as Nomad's jobspec2 resolves them): first every
/// definition is read and checked, then each local's `local.*` references are ordered
/// depth first, then each is evaluated in that order. A reference to no local, or a cycle,
/// is an error naming the locals and where one of them is.
pub(super) fn evaluate_locals(scope: &mut Scope, blocks: &[&Block]) -> Result<(), Problem> {
    let definitions = local_definitions(blocks)?;
    for name in dependency_order(&definitions)? {
        let attribute = definitions[name].attribute;
        let read = value(scope, &attribute.value, &format!("local.{name}"))?;
        scope.locals.insert(name.to_string(), read);
    }
    Ok(())
}

/// One local: where it is defined, and the locals its expression names, by their index in
/// the definitions, in the order written (a name used twice is listed twice).
struct Local<'b> {
    attribute: &'b Attribute,
    references: Vec<usize>,
}

/// Every `locals` block's attributes, in the order written, with what each references; an
/// error for a label, a nested block, a name defined twice, more than [`MAX_VARIABLES`],
/// or a reference to a local that no block defines (named where the reference is).
fn local_definitions<'b>(blocks: &[&'b Block]) -> Result<IndexedLocals<'b>, Problem> {
    let mut locals = IndexedLocals::default();
    for block in blocks {
        if let Some(label) = block.labels.first() {
            return Err(Problem::at(label.span(), "a locals block takes no label"));
        }
        if let Some(inner) = block.body.blocks().next() {
            return Err(Problem::at(
                inner.ident.span(),
                format!("locals: unexpected block {:?}", inner.ident.as_str()),
            ));
        }
        for attribute in block.body.attributes() {
            let name = attribute.key.as_str();
            if locals.names.len() >= MAX_VARIABLES {
                return Err(Problem::at(
                    attribute.key.span(),
                    format!("more than {MAX_VARIABLES} locals"),
                ));
            }
            if locals.index.contains_key(name) {
                return Err(Problem::at(
                    attribute.key.span(),
                    format!("local {name:?} is defined twice"),
                ));
            }
            locals.index.insert(name, locals.names.len());
            locals.names.push(name);
            locals.defined.push(Local {
                attribute,
                references: Vec::new(),
            });
        }
    }
    for local in &mut locals.defined {
        let name = local.attribute.key.as_str();
        for (referenced, span) in local_references(&local.attribute.value) {
            let Some(&index) = locals.index.get(referenced.as_str()) else {
                return Err(Problem::at(
                    span,
                    format!(
                        "local.{name}: there is no local {referenced:?} (define it in a locals \
                         block)"
                    ),
                ));
            };
            local.references.push(index);
        }
    }
    Ok(locals)
}

/// The locals by name and in the order written.
#[derive(Default)]
struct IndexedLocals<'b> {
    names: Vec<&'b str>,
    index: std::collections::BTreeMap<&'b str, usize>,
    defined: Vec<Local<'b>>,
}

impl<'b> std::ops::Index<&str> for IndexedLocals<'b> {
    type Output = Local<'b>;
    fn index(&self, name: &str) -> &Local<'b> {
        &self.defined[self.index[name]]
    }
}

/// The locals' names, each after every local it references: a depth-first walk from each
/// local in the order written, with an explicit stack (a chain of [`MAX_VARIABLES`] locals
/// uses no recursion). A reference back to a local still on the walk's path is a cycle:
/// an error at that local's definition naming the locals around the cycle.
fn dependency_order<'b>(locals: &IndexedLocals<'b>) -> Result<Vec<&'b str>, Problem> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnPath,
        Done,
    }
    let count = locals.defined.len();
    let mut marks = vec![Mark::Unvisited; count];
    let mut order = Vec::with_capacity(count);
    for root in 0..count {
        if marks[root] != Mark::Unvisited {
            continue;
        }
        // Each entry: a local on the path, and how many of its references are walked.
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        marks[root] = Mark::OnPath;
        while let Some((local, next)) = path.last_mut() {
            let (local, references) = (*local, &locals.defined[*local].references);
            let Some(&referenced) = references.get(*next) else {
                marks[local] = Mark::Done;
                order.push(locals.names[local]);
                path.pop();
                continue;
            };
            *next += 1;
            match marks[referenced] {
                Mark::Done => {}
                Mark::Unvisited => {
                    marks[referenced] = Mark::OnPath;
                    path.push((referenced, 0));
                }
                Mark::OnPath => return Err(cycle(locals, &path, referenced)),
            }
        }
    }
    debug_assert_eq!(order.len(), count, "every local is ordered once");
    debug_assert!(marks.iter().all(|mark| *mark == Mark::Done));
    Ok(order)
}

/// The error for a cycle: the walk's path from `back_to` (the local referenced again) to
/// its end, which references `back_to`; placed at `back_to`'s definition.
fn cycle(locals: &IndexedLocals, path: &[(usize, usize)], back_to: usize) -> Problem {
    let from = path
        .iter()
        .position(|(local, _)| *local == back_to)
        .expect("a local marked on the path is on it");
    let mut around: Vec<String> = path[from..]
        .iter()
        .map(|(local, _)| format!("local.{}", locals.names[*local]))
        .collect();
    around.push(format!("local.{}", locals.names[back_to]));
    let name = locals.names[back_to];
    let what = if around.len() == 2 {
        format!("local.{name} refers to itself")
    } else {
        format!("local.{name}: the locals refer to each other in a cycle")
    };
    Problem::at(
        locals.defined[back_to].attribute.key.span(),
        format!("{what} ({}): no order evaluates them", around.join(" -> ")),
    )
}
