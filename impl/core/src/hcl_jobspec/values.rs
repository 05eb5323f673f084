//! An attribute's expression as JSON: literals as they are, `var.<name>` and
//! `local.<name>` evaluated, and the `${…}` the agent fills in when a task starts
//! (`${NOMAD_ALLOC_DIR}`, `${node.unique.name}`, `${attr.kernel.name}`, `${meta.x}`) kept
//! as the text the user wrote.
//!
//! Only what names `var` or `local` is evaluated, with hcl-rs's evaluator
//! (`hcl::eval`), over a context holding just the variables it names. No function is
//! declared, so a function call is refused by name, as is a `for` expression: both can
//! make unbounded work from bounded text. What evaluation copies out of variables counts
//! against [`MAX_EXPANDED_BYTES`], so a megabyte variable named a thousand times is an
//! error, not a gigabyte.

use super::error::Problem;
use super::places::Recorder;
use hcl::edit::expr::{Expression, ObjectKey, TraversalOperator};
use hcl::edit::template::{Element, Template};
use hcl::edit::visit::{self, Visit};
use hcl::edit::Span;
use serde_json::{json, Map, Value};
use std::cell::Cell;
use std::ops::Range;

/// The most bytes of variables' values that evaluating one jobspec may copy into it: the
/// agent's request body limit (8 MiB), since a job larger than that could not be sent.
pub const MAX_EXPANDED_BYTES: usize = 8 << 20;

/// What `var.<name>` and `local.<name>` mean while one text is read, and the text itself
/// (kept interpolations are copied from it).
pub(super) struct Scope<'a> {
    source: &'a str,
    /// `None` where variables may not be used: a variable's default, a var-file.
    variables: Option<&'a Map<String, Value>>,
    pub locals: Map<String, Value>,
    expanded_bytes: Cell<usize>,
    /// Where each JSON field read from the text was written (`places.rs`).
    pub places: Recorder,
}

impl<'a> Scope<'a> {
    /// Where `var.*` and `local.*` are evaluated: the jobspec's blocks and locals.
    pub fn new(source: &'a str, variables: &'a Map<String, Value>) -> Scope<'a> {
        Scope {
            source,
            variables: Some(variables),
            locals: Map::new(),
            expanded_bytes: Cell::new(0),
            places: Recorder::default(),
        }
    }

    /// Where values must be literal: a variable's default, a var-file, a `-var` value.
    pub fn literal(source: &'a str) -> Scope<'a> {
        Scope {
            source,
            variables: None,
            locals: Map::new(),
            expanded_bytes: Cell::new(0),
            places: Recorder::default(),
        }
    }
}

/// `expr` as JSON; `at` names where it is (`job "web".group "g".count`) for errors.
pub(super) fn value(scope: &Scope, expr: &Expression, at: &str) -> Result<Value, Problem> {
    use Expression as E;
    Ok(match expr {
        E::Null(_) => Value::Null,
        E::Bool(b) => json!(*b.value()),
        E::Number(n) => number(n.value(), expr.span(), at)?,
        E::String(s) => json!(s.value()),
        E::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| value(scope, item, at))
                .collect::<Result<_, _>>()?,
        ),
        E::Object(object) => {
            let mut out = Map::new();
            for (key, item) in object.iter() {
                let key = match key {
                    ObjectKey::Ident(ident) => ident.as_str().to_string(),
                    ObjectKey::Expression(key) => match value(scope, key, at)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    },
                };
                let path = format!("{at}.{key}");
                out.insert(key, value(scope, item.expr(), &path)?);
            }
            Value::Object(out)
        }
        E::StringTemplate(template) => json!(text(scope, template, at)?),
        E::HeredocTemplate(heredoc) => json!(text(scope, &heredoc.template, at)?),
        E::Parenthesis(inner) => value(scope, inner.inner(), at)?,
        E::Variable(_) | E::Traversal(_) => evaluate(scope, expr, at)?,
        // Only over variables: an expression of literals alone is a value to write out.
        E::Conditional(_) | E::UnaryOp(_) | E::BinaryOp(_) if names_variables(expr) => {
            evaluate(scope, expr, at)?
        }
        E::Conditional(_) | E::UnaryOp(_) | E::BinaryOp(_) => {
            return Err(Problem::at(
                expr.span(),
                format!(
                    "{at}: an expression of literals is not evaluated (only those over var.* \
                     and local.* are): write its value"
                ),
            ))
        }
        E::FuncCall(_) | E::ForExpr(_) => {
            return Err(refused(expr, at).unwrap_or_else(|| {
                Problem::at(
                    expr.span(),
                    format!("{at}: this expression is not supported"),
                )
            }))
        }
    })
}

fn number(n: &hcl::Number, span: Option<Range<usize>>, at: &str) -> Result<Value, Problem> {
    match (n.as_i64(), n.as_f64()) {
        (Some(i), _) => Ok(json!(i)),
        (None, Some(f)) => Ok(json!(f)),
        (None, None) => Err(Problem::at(span, format!("{at}: number out of range"))),
    }
}

/// A template as text: literals as they read, interpolations that name `var` or `local`
/// evaluated, and the others (the agent's `${NOMAD_*}`, `${node.*}`, …) kept as written.
fn text(scope: &Scope, template: &Template, at: &str) -> Result<String, Problem> {
    let mut out = String::new();
    for element in template.iter() {
        match element {
            Element::Literal(literal) => out.push_str(literal.value()),
            Element::Interpolation(interpolation) if names_variables(&interpolation.expr) => {
                match evaluate(scope, &interpolation.expr, at)? {
                    Value::String(s) => out.push_str(&s),
                    simple @ (Value::Number(_) | Value::Bool(_)) => {
                        out.push_str(&simple.to_string())
                    }
                    other => {
                        return Err(Problem::at(
                            interpolation.span(),
                            format!("{at}: a {} cannot be put in a string", kind_of(&other)),
                        ))
                    }
                }
            }
            // (The syntax tree's walk skips a `for` directive's collection: its text is
            // looked at too.)
            Element::Directive(directive)
                if names_variables_in(|v| v.visit_directive(directive))
                    || mentions_variables(source_of(scope, directive.span())) =>
            {
                return Err(Problem::at(
                    directive.span(),
                    format!("{at}: template directives (%{{…}}) over variables are not supported"),
                ))
            }
            kept => match kept.span().and_then(|span| scope.source.get(span)) {
                Some(written) => out.push_str(written),
                None => {
                    return Err(Problem::at(
                        template.span(),
                        format!("{at}: a template element without its text"),
                    ))
                }
            },
        }
    }
    Ok(out)
}

/// The source text of `span`, if it has one.
fn source_of<'s>(scope: &Scope<'s>, span: Option<Range<usize>>) -> &'s str {
    span.and_then(|span| scope.source.get(span)).unwrap_or("")
}

/// Whether source text names `var.` or `local.` (what a syntax walk may not reach).
fn mentions_variables(text: &str) -> bool {
    text.contains("var.") || text.contains("local.")
}

/// What `var.*` or `local.*` names evaluated, over a context holding just those. Refused
/// before: template directives (`%{for}` multiplies what it is given: a few hundred bytes
/// can ask for gigabytes), division and remainder (by zero, hcl-rs panics); a panic of the
/// evaluator all the same (an overflow) is an error naming the expression.
fn evaluate(scope: &Scope, expr: &Expression, at: &str) -> Result<Value, Problem> {
    if let Some(problem) = refused(expr, at) {
        return Err(problem);
    }
    let written = source_of(scope, expr.span());
    if written.contains("%{") {
        return Err(Problem::at(
            expr.span(),
            format!("{at}: template directives (%{{…}}) are not evaluated: write the value"),
        ));
    }
    let mut operators = Operators::default();
    operators.visit_expr(expr);
    if let Some(span) = operators.division {
        return Err(Problem::at(
            span,
            format!("{at}: division and remainder (/, %) are not evaluated: write the value"),
        ));
    }
    let mut names = Names::default();
    names.visit_expr(expr);
    if let Some((name, span)) = names.other.first() {
        return Err(Problem::at(
            span.clone(),
            format!(
                "{at}: unknown name {name:?}: only var.<name> and local.<name> are evaluated \
                 here (the agent's own values, such as ${{node.unique.name}}, go inside a string)"
            ),
        ));
    }
    let Some(variables) = scope.variables else {
        return Err(Problem::at(
            expr.span(),
            format!("{at}: variables may not be used here; write a literal value"),
        ));
    };
    let mut context = hcl::eval::Context::new();
    for (root, known) in [("var", variables), ("local", &scope.locals)] {
        let mut used = hcl::Map::new();
        for (named_root, name, span) in &names.used {
            if named_root != root {
                continue;
            }
            let Some(found) = known.get(name) else {
                let what = if root == "var" {
                    format!("there is no variable {name:?} (declare it: variable {name:?} {{}})")
                } else {
                    format!("there is no local {name:?} (define it in a locals block)")
                };
                return Err(Problem::at(span.clone(), format!("{at}: {what}")));
            };
            charge(scope, found, span.clone(), at)?;
            used.insert(name.clone(), hcl_value(found));
        }
        context.declare_var(root, hcl::Value::Object(used));
    }
    let expression = hcl::Expression::from(expr.clone());
    let evaluated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        hcl::eval::Evaluate::evaluate(&expression, &context)
    }))
    .map_err(|_| {
        Problem::at(
            expr.span(),
            format!("{at}: the expression cannot be evaluated (a number out of range?)"),
        )
    })?;
    let result = evaluated.map_err(|e| Problem::at(expr.span(), format!("{at}: {e}")))?;
    serde_json::to_value(&result)
        .map_err(|e| Problem::at(expr.span(), format!("{at}: the value: {e}")))
}

/// Counts a variable's value against [`MAX_EXPANDED_BYTES`].
fn charge(
    scope: &Scope,
    found: &Value,
    span: Option<Range<usize>>,
    at: &str,
) -> Result<(), Problem> {
    let total = scope.expanded_bytes.get().saturating_add(size_of(found));
    if total > MAX_EXPANDED_BYTES {
        return Err(Problem::at(
            span,
            format!(
                "{at}: the variables used so far expand the jobspec by more than \
                 {MAX_EXPANDED_BYTES} bytes"
            ),
        ));
    }
    scope.expanded_bytes.set(total);
    Ok(())
}

/// About how many bytes a value takes as JSON.
pub(super) fn size_of(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(size_of).sum::<usize>() + 2,
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + size_of(v)).sum::<usize>() + 2,
    }
}

fn hcl_value(value: &Value) -> hcl::Value {
    match value {
        Value::Null => hcl::Value::Null,
        Value::Bool(b) => hcl::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => hcl::Value::from(i),
            (None, Some(f)) => hcl::Value::from(f),
            (None, None) => hcl::Value::Null,
        },
        Value::String(s) => hcl::Value::String(s.clone()),
        Value::Array(items) => hcl::Value::Array(items.iter().map(hcl_value).collect()),
        Value::Object(map) => {
            hcl::Value::Object(map.iter().map(|(k, v)| (k.clone(), hcl_value(v))).collect())
        }
    }
}

/// The name of a JSON value's kind, for errors.
pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The first function call or `for` expression in `expr`, refused by name.
fn refused(expr: &Expression, at: &str) -> Option<Problem> {
    #[derive(Default)]
    struct Refusals(Option<Problem>);
    impl Refusals {
        fn note(&mut self, span: Option<Range<usize>>, message: String) {
            self.0.get_or_insert(Problem::at(span, message));
        }
    }
    impl Visit for Refusals {
        fn visit_func_call(&mut self, call: &hcl::edit::expr::FuncCall) {
            self.note(
                call.span(),
                format!(
                    "function calls are not supported ({}()); write the value, or use var.<name>",
                    call.name.name.as_str()
                ),
            );
        }
        fn visit_for_expr(&mut self, node: &hcl::edit::expr::ForExpr) {
            self.note(node.span(), "for expressions are not supported".into());
        }
    }
    let mut refusals = Refusals::default();
    refusals.visit_expr(expr);
    refusals
        .0
        .map(|p| Problem::at(p.span, format!("{at}: {}", p.message)))
}

/// The names an expression uses: `var.<name>` and `local.<name>`, and any other root.
#[derive(Default)]
struct Names {
    used: Vec<(String, String, Option<Range<usize>>)>,
    other: Vec<(String, Option<Range<usize>>)>,
}

impl Visit for Names {
    fn visit_expr(&mut self, expr: &Expression) {
        match expr {
            Expression::Traversal(traversal) => {
                if let Expression::Variable(root) = &traversal.expr {
                    let root_name = root.as_str();
                    if matches!(root_name, "var" | "local") {
                        match traversal.operators.first().map(|op| op.value()) {
                            Some(TraversalOperator::GetAttr(name)) => self.used.push((
                                root_name.to_string(),
                                name.as_str().to_string(),
                                traversal.span(),
                            )),
                            _ => self.other.push((root_name.to_string(), traversal.span())),
                        }
                        // The operators' own expressions (`var.list[local.i]`).
                        for operator in &traversal.operators {
                            self.visit_traversal_operator(operator.value());
                        }
                        return;
                    }
                }
                visit::visit_expr(self, expr);
            }
            Expression::Variable(root) => {
                self.other.push((root.as_str().to_string(), expr.span()));
            }
            _ => visit::visit_expr(self, expr),
        }
    }

    // A `for` expression's own names (`[for x in var.l : x]`) are refused before this.
}

/// The `local.<name>` references of an expression, in the order written, each with the
/// byte range of the reference: what a local depends on (`variables.rs` orders locals so).
pub(super) fn local_references(expr: &Expression) -> Vec<(String, Option<Range<usize>>)> {
    let mut names = Names::default();
    names.visit_expr(expr);
    names
        .used
        .into_iter()
        .filter(|(root, _, _)| root == "local")
        .map(|(_, name, span)| (name, span))
        .collect()
}

/// The first division or remainder in an expression.
#[derive(Default)]
struct Operators {
    division: Option<Option<Range<usize>>>,
}

impl Visit for Operators {
    fn visit_binary_operator(
        &mut self,
        operator: &hcl::edit::Decorated<hcl::edit::expr::BinaryOperator>,
    ) {
        use hcl::edit::expr::BinaryOperator::{Div, Mod};
        if self.division.is_none() && matches!(operator.value(), Div | Mod) {
            self.division = Some(operator.span());
        }
    }
}

/// Whether `expr` names `var` or `local` anywhere.
fn names_variables(expr: &Expression) -> bool {
    names_variables_in(|v| v.visit_expr(expr))
}

fn names_variables_in(walk: impl FnOnce(&mut Names)) -> bool {
    let mut names = Names::default();
    walk(&mut names);
    !names.used.is_empty()
        || names
            .other
            .iter()
            .any(|(name, _)| matches!(name.as_str(), "var" | "local"))
}
