//! HCL jobspecs: every error names its file, line and column; variables take their values
//! from defaults, the environment, var-files and `-var` flags, in Nomad's precedence.

use quiesce_core::hcl_jobspec::{
    parse, parse_job, parse_placed, Error, Input, LineColumn, VariableInputs,
};
use serde_json::Value;

fn refused(name: &str, text: &str) -> Error {
    parse(Input { name, text }, &VariableInputs::default()).unwrap_err()
}

fn start(error: &Error) -> (usize, usize) {
    let place = error.place.expect("a place");
    (place.start.line, place.start.column)
}

// Positions.

#[test]
fn an_unsupported_attribute_on_line_3_is_named_at_its_key() {
    let text = "job \"web\" {\n  group \"g\" {\n    kil_timeout = \"5s\"\n  }\n}\n";
    let error = refused("web.hcl", text);
    assert_eq!(start(&error), (3, 5));
    assert_eq!(
        error.place.unwrap().end,
        LineColumn {
            line: 3,
            column: 16
        }
    );
    assert_eq!(
        error.to_string(),
        "web.hcl:3:5: job \"web\".group \"g\": unsupported attribute \"kil_timeout\""
    );
    assert_eq!(
        error.nomad_style(),
        "web.hcl:3,5-16: job \"web\".group \"g\": unsupported attribute \"kil_timeout\""
    );
}

#[test]
fn a_bad_duration_is_named_at_its_value() {
    let text = "job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      kill_timeout = \"5 seconds\"\n    }\n  }\n}\n";
    let error = refused("web.hcl", text);
    assert_eq!(start(&error), (4, 22));
    assert!(
        error
            .message
            .ends_with("kill_timeout: \"5 seconds\" is not a duration (e.g. \"30s\", \"1m30s\")"),
        "{error}"
    );
}

#[test]
fn an_unknown_block_is_named_at_its_identifier() {
    let text =
        "job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      sprocket {}\n    }\n  }\n}\n";
    let error = refused("-", text);
    assert_eq!(start(&error), (4, 7));
    assert!(
        error.message.ends_with("unsupported block \"sprocket\""),
        "{error}"
    );
}

#[test]
fn wrong_labels_are_named_at_the_block() {
    let error = refused("web.hcl", "job \"web\" {\n  group {\n  }\n}\n");
    assert_eq!(start(&error), (2, 3));
    assert!(error.message.contains("needs exactly one label"), "{error}");
}

#[test]
fn a_value_of_the_wrong_type_inside_a_block_is_named_where_it_is() {
    let text = "job \"web\" {\n  meta {\n    owner = [\"a\"]\n  }\n}\n";
    let error = refused("web.hcl", text);
    assert_eq!(start(&error), (3, 5));
    assert!(
        error.message.contains("a meta value is a string"),
        "{error}"
    );
}

#[test]
fn a_syntax_error_is_named_where_the_parser_stopped() {
    let error = refused(
        "web.hcl",
        "job \"web\" {\n  group \"g\" {\n    count = \n  }\n}\n",
    );
    assert_eq!(error.file.as_deref(), Some("web.hcl"));
    // Line 3 ends after `count = `: the parser stops at its end, column 13.
    assert_eq!(start(&error), (3, 13));
    assert!(
        error
            .to_string()
            .starts_with("web.hcl:3:13: invalid expression"),
        "{error}"
    );
    assert!(
        error.nomad_style().starts_with("web.hcl:3,13-13: "),
        "{error}"
    );
}

#[test]
fn the_api_s_parse_names_its_input_as_nomad_does() {
    let error = parse_job("job \"x\" {\n sprocket {}\n}").unwrap_err();
    assert_eq!(
        error.nomad_style(),
        "input.hcl:2,2-10: job \"x\": unsupported block \"sprocket\""
    );
}

// Variables.

const COUNTED: &str = r#"
variable "count" {
  type    = number
  default = 1
}
variable "image" {
  type = string
  default = "web"
}
job "web" {
  group "g" {
    count = var.count
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/${var.image}"
        args    = ["${NOMAD_ALLOC_DIR}", "${node.unique.name}", "${attr.kernel.name}", "${meta.x}", "${NOMAD_PORT_http}"]
      }
    }
  }
}
"#;

fn count_with(inputs: &VariableInputs) -> Result<Value, Error> {
    let job = parse(
        Input {
            name: "web.hcl",
            text: COUNTED,
        },
        inputs,
    )?;
    Ok(job["TaskGroups"][0]["Count"].clone())
}

fn flags(given: &[(&str, &str)]) -> Vec<(String, String)> {
    given
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_default_is_the_value_when_nothing_else_is_given() {
    assert_eq!(count_with(&VariableInputs::default()).unwrap(), 1);
}

#[test]
fn a_var_flag_overrides_the_default_and_is_converted_to_the_declared_type() {
    let inputs = VariableInputs {
        flags: flags(&[("count", "2")]),
        ..Default::default()
    };
    assert_eq!(count_with(&inputs).unwrap(), 2);
}

#[test]
fn a_var_file_sets_declared_variables() {
    let inputs = VariableInputs {
        files: vec![Input {
            name: "prod.vars.hcl",
            text: "count = 3\n",
        }],
        ..Default::default()
    };
    assert_eq!(count_with(&inputs).unwrap(), 3);
}

#[test]
fn the_environment_sets_declared_variables_and_undeclared_ones_are_ignored() {
    let inputs = VariableInputs {
        env: flags(&[("count", "4"), ("unrelated", "x")]),
        ..Default::default()
    };
    assert_eq!(count_with(&inputs).unwrap(), 4);
}

#[test]
fn precedence_is_default_then_env_then_var_files_in_order_then_var_flags_in_order() {
    let file = |text| Input {
        name: "v.hcl",
        text,
    };
    let mut inputs = VariableInputs {
        env: flags(&[("count", "4")]),
        files: vec![file("count = 5"), file("count = 6")],
        flags: flags(&[("count", "7"), ("count", "8")]),
    };
    assert_eq!(count_with(&inputs).unwrap(), 8);
    inputs.flags.clear();
    assert_eq!(count_with(&inputs).unwrap(), 6);
    inputs.files.clear();
    assert_eq!(count_with(&inputs).unwrap(), 4);
}

#[test]
fn a_required_variable_left_unset_is_an_error_naming_it_where_it_is_declared() {
    let text =
        "variable \"region\" {\n  type = string\n}\njob \"web\" {\n  region = var.region\n}\n";
    let error = refused("web.hcl", text);
    assert_eq!(start(&error), (1, 1));
    assert!(
        error
            .message
            .starts_with("Required variable \"region\" is not set"),
        "{error}"
    );
}

#[test]
fn a_var_flag_for_an_undeclared_variable_is_an_error() {
    let inputs = VariableInputs {
        flags: flags(&[("colour", "red")]),
        ..Default::default()
    };
    let error = count_with(&inputs).unwrap_err();
    assert_eq!((error.file.as_deref(), error.place), (None, None));
    assert!(
        error
            .message
            .starts_with("-var \"colour\": no variable \"colour\" is declared"),
        "{error}"
    );
}

#[test]
fn a_value_not_of_the_declared_type_is_an_error() {
    let inputs = VariableInputs {
        flags: flags(&[("count", "two")]),
        ..Default::default()
    };
    let error = count_with(&inputs).unwrap_err();
    assert!(
        error
            .message
            .contains("invalid value for variable \"count\": a number is required"),
        "{error}"
    );
    let inputs = VariableInputs {
        files: vec![Input {
            name: "v.hcl",
            text: "\ncount = [1]\n",
        }],
        ..Default::default()
    };
    let error = count_with(&inputs).unwrap_err();
    assert_eq!(error.file.as_deref(), Some("v.hcl"));
    assert_eq!(start(&error), (2, 9));
    assert!(error.message.contains("a number is required"), "{error}");
    let error = refused(
        "web.hcl",
        "variable \"n\" {\n  type    = bool\n  default = \"maybe\"\n}\njob \"a\" {}\n",
    );
    assert_eq!(start(&error), (3, 13));
}

#[test]
fn variables_inside_strings_are_evaluated_and_the_agent_s_interpolations_kept() {
    let inputs = VariableInputs {
        flags: flags(&[("image", "nginx")]),
        ..Default::default()
    };
    let job = parse(
        Input {
            name: "web.hcl",
            text: COUNTED,
        },
        &inputs,
    )
    .unwrap();
    let config = &job["TaskGroups"][0]["Tasks"][0]["Config"];
    assert_eq!(config["command"], "/bin/nginx");
    assert_eq!(
        config["args"],
        serde_json::json!([
            "${NOMAD_ALLOC_DIR}",
            "${node.unique.name}",
            "${attr.kernel.name}",
            "${meta.x}",
            "${NOMAD_PORT_http}"
        ])
    );
}

#[test]
fn locals_see_variables_and_other_locals() {
    let text = r#"
variable "env" { default = "prod" }
locals {
  name  = "web-${var.env}"
  count = var.env == "prod" ? 3 : 1
}
locals {
  tag = "${local.name}-v1"
}
job "web" {
  group "g" {
    count = local.count
    meta { tag = local.tag }
  }
}
"#;
    let job = parse(
        Input {
            name: "web.hcl",
            text,
        },
        &VariableInputs::default(),
    )
    .unwrap();
    assert_eq!(job["TaskGroups"][0]["Count"], 3);
    assert_eq!(job["TaskGroups"][0]["Meta"]["tag"], "web-prod-v1");
}

fn parsed(text: &str) -> Value {
    parse(
        Input {
            name: "web.hcl",
            text,
        },
        &VariableInputs::default(),
    )
    .unwrap()
}

/// A job whose group's count and meta tag are `local.count` and `local.tag`.
const USES_LOCALS: &str = "job \"web\" {\n  group \"g\" {\n    count = local.count\n    \
                           meta { tag = local.tag }\n  }\n}\n";

#[test]
fn a_local_may_name_one_defined_after_it_in_the_same_block() {
    let text =
        format!("locals {{\n  tag   = \"v${{local.count}}\"\n  count = 2\n}}\n{USES_LOCALS}");
    let job = parsed(&text);
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
    assert_eq!(job["TaskGroups"][0]["Meta"]["tag"], "v2");
}

#[test]
fn a_local_may_name_one_defined_in_a_later_block() {
    let text = format!(
        "locals {{\n  tag = \"${{local.name}}-v1\"\n}}\n{USES_LOCALS}\
         locals {{\n  name  = \"web\"\n  count = 1\n}}\n"
    );
    let job = parsed(&text);
    assert_eq!(job["TaskGroups"][0]["Meta"]["tag"], "web-v1");
}

#[test]
fn a_chain_of_locals_written_backwards_is_evaluated_from_its_end() {
    // local.l0 names l1, which names l2, … l49 = 1: each adds one.
    let mut text = String::from("locals {\n");
    for i in 0..49 {
        text.push_str(&format!("  l{i} = local.l{} + 1\n", i + 1));
    }
    text.push_str("  l49 = 1\n  count = local.l0\n  tag = \"${local.l10}\"\n}\n");
    text.push_str(USES_LOCALS);
    let job = parsed(&text);
    assert_eq!(job["TaskGroups"][0]["Count"], 50);
    assert_eq!(job["TaskGroups"][0]["Meta"]["tag"], "40");
}

#[test]
fn locals_that_refer_to_each_other_in_a_cycle_are_named_with_a_place() {
    let text = format!(
        "locals {{\n  count = 1\n  a = local.b\n}}\nlocals {{\n  b = \"${{local.c}}\"\n  \
         c = local.a\n  tag = local.a\n}}\n{USES_LOCALS}"
    );
    let error = refused("web.hcl", &text);
    let message = error.to_string();
    assert!(
        message.contains("local.a -> local.b -> local.c -> local.a"),
        "{message}"
    );
    assert!(message.contains("cycle"), "{message}");
    // Placed at local.a's definition: line 3, column 3.
    assert!(message.starts_with("web.hcl:3:3: local.a:"), "{message}");
    assert_eq!(start(&error), (3, 3));
}

#[test]
fn a_local_that_refers_to_itself_is_refused_where_it_is_defined() {
    let text = format!("locals {{\n  count = 1\n  tag = \"x${{local.tag}}\"\n}}\n{USES_LOCALS}");
    let error = refused("web.hcl", &text);
    assert_eq!(
        error.to_string(),
        "web.hcl:3:3: local.tag refers to itself (local.tag -> local.tag): no order \
         evaluates them"
    );
}

#[test]
fn a_reference_to_a_local_no_block_defines_is_named_where_it_is_written() {
    let text = format!("locals {{\n  count = 1\n  tag   = local.missing\n}}\n{USES_LOCALS}");
    let error = refused("web.hcl", &text);
    assert_eq!(
        error.to_string(),
        "web.hcl:3:11: local.tag: there is no local \"missing\" (define it in a locals block)"
    );
    // Outside locals, too.
    let error = refused(
        "web.hcl",
        &format!("locals {{\n  count = 1\n}}\n{USES_LOCALS}"),
    );
    assert!(
        error.to_string().starts_with("web.hcl:7:18:")
            && error.to_string().contains("there is no local \"tag\""),
        "{error}"
    );
}

#[test]
fn locals_doubling_each_other_in_any_order_stop_at_the_expansion_bound() {
    // d0 is 1 KiB; each later one doubles the one before: d30 would be a terabyte.
    let mut text = String::from("locals {\n  count = 1\n  tag = local.d30\n");
    for i in (1..=30).rev() {
        text.push_str(&format!(
            "  d{i} = \"${{local.d{0}}}${{local.d{0}}}\"\n",
            i - 1
        ));
    }
    text.push_str(&format!(
        "  d0 = \"{}\"\n}}\n{USES_LOCALS}",
        "x".repeat(1024)
    ));
    let error = refused("web.hcl", &text);
    assert!(
        error
            .to_string()
            .contains("expand the jobspec by more than"),
        "{error}"
    );
}

#[test]
fn more_locals_than_the_bound_are_refused() {
    let mut text = String::from("locals {\n");
    for i in 0..=quiesce_core::hcl_jobspec::MAX_VARIABLES {
        text.push_str(&format!("  l{i} = {i}\n"));
    }
    text.push_str("}\njob \"web\" {}\n");
    let error = refused("web.hcl", &text);
    assert!(
        error.to_string().contains("more than 256 locals"),
        "{error}"
    );
}

#[test]
fn a_variable_of_a_list_type_takes_a_var_flag_as_an_hcl_value() {
    let text =
        "variable \"dcs\" {\n  type = list(string)\n}\njob \"web\" {\n  datacenters = var.dcs\n}\n";
    let inputs = VariableInputs {
        flags: flags(&[("dcs", "[\"dc1\", \"dc2\"]")]),
        ..Default::default()
    };
    let job = parse(
        Input {
            name: "web.hcl",
            text,
        },
        &inputs,
    )
    .unwrap();
    assert_eq!(job["Datacenters"], serde_json::json!(["dc1", "dc2"]));
}

#[test]
fn a_runtime_name_outside_a_string_and_a_variable_in_a_default_are_refused_where_they_are() {
    let error = refused("web.hcl", "job \"web\" {\n  region = node.region\n}\n");
    assert_eq!(start(&error), (2, 12));
    assert!(error.message.contains("unknown name \"node\""), "{error}");
    let error = refused(
        "web.hcl",
        "variable \"a\" { default = 1 }\nvariable \"b\" { default = var.a }\njob \"web\" {}\n",
    );
    assert_eq!(start(&error), (2, 26));
    assert!(
        error.message.contains("variables may not be used here"),
        "{error}"
    );
}

#[test]
fn a_variable_named_many_times_cannot_expand_the_jobspec_past_its_bound() {
    let big = "x".repeat(1 << 20);
    let references = "\"${var.big}\",".repeat(16);
    let text = format!(
        "variable \"big\" {{}}\njob \"web\" {{\n  meta {{\n    tags = [{references}]\n  }}\n}}\n"
    );
    let inputs = VariableInputs {
        flags: vec![("big".into(), big)],
        ..Default::default()
    };
    let error = parse(
        Input {
            name: "web.hcl",
            text: &text,
        },
        &inputs,
    )
    .unwrap_err();
    assert!(
        error.message.contains("expand the jobspec by more than"),
        "{error}"
    );
    assert_eq!(start(&error).0, 4);
}

fn refused_with_n(text: &str) -> Error {
    let inputs = VariableInputs {
        flags: flags(&[("n", "3")]),
        ..Default::default()
    };
    let text = format!("variable \"n\" {{\n  type = number\n}}\n{text}");
    parse(
        Input {
            name: "web.hcl",
            text: &text,
        },
        &inputs,
    )
    .unwrap_err()
}

#[test]
fn division_and_remainder_are_refused_before_the_evaluator_can_panic() {
    for op in ["%", "/"] {
        let error = refused_with_n(&format!("job \"a\" {{\n  priority = var.n {op} 0\n}}\n"));
        assert!(error.message.contains("division and remainder"), "{error}");
        assert_eq!(start(&error), (5, 20), "{error}");
    }
}

#[test]
fn an_overflow_in_the_evaluator_is_an_error_not_a_crash() {
    let error = refused_with_n("job \"a\" {\n  priority = var.n + 18446744073709551615\n}\n");
    // Either hcl-rs refuses it, or its panic is caught: an error naming the place.
    assert_eq!(start(&error).0, 5, "{error}");
}

#[test]
fn expressions_of_literals_alone_are_not_evaluated() {
    let error = refused("web.hcl", "job \"a\" {\n  priority = 1 % 0\n}\n");
    assert!(error.message.contains("not evaluated"), "{error}");
    assert_eq!(start(&error), (2, 14));
}

#[test]
fn template_directives_in_an_evaluated_expression_are_refused_before_they_expand() {
    // Eight nested loops of ten: 10^8 copies of the text, were it evaluated.
    let mut template = "x".repeat(100);
    for _ in 0..8 {
        template = format!("%{{for a in [0,0,0,0,0,0,0,0,0,0]}}{template}%{{endfor}}");
    }
    let text =
        format!("job \"a\" {{\n  meta {{\n    m = var.n > 0 ? \"{template}\" : \"\"\n  }}\n}}\n");
    let error = refused_with_n(&text);
    assert!(error.message.contains("template directives"), "{error}");
    // A directive over a variable in a plain string, its collection included.
    let text = "variable \"l\" {\n  default = [\"a\"]\n}\njob \"a\" {\n  meta {\n    m = \"%{ for s in var.l }${s}%{ endfor }\"\n  }\n}\n";
    let error = refused("web.hcl", text);
    assert!(error.message.contains("directives"), "{error}");
}

// Validation errors of a converted jobspec, placed in its text.

/// A valid job, with `group` and `task` lines added to its group and its task.
fn job_with(group: &str, task: &str) -> String {
    format!(
        "job \"web\" {{\n  group \"g\" {{\n{group}\n    task \"t\" {{\n      driver = \"raw_exec\"\n\
         {task}\n      config {{ command = \"/bin/sleep\" }}\n    }}\n  }}\n}}\n"
    )
}

/// The validation errors of `text`, each as `file:line:column: path: problem`.
fn validation_errors(text: &str) -> Vec<String> {
    let placed = parse_placed(
        Input {
            name: "web.nomad.hcl",
            text,
        },
        &VariableInputs::default(),
    )
    .unwrap();
    let errors = placed.check().expect_err("an invalid job");
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn a_valid_jobspec_checks_clean() {
    let text = job_with("    count = 2", "      kill_timeout = \"10s\"");
    let placed = parse_placed(
        Input {
            name: "web.nomad.hcl",
            text: &text,
        },
        &VariableInputs::default(),
    )
    .unwrap();
    assert_eq!(placed.check(), Ok(()));
    assert!(!placed.places.is_empty());
}

#[test]
fn each_validation_error_names_the_line_and_column_of_its_attribute_or_block() {
    let cases = [
        (
            job_with("    count = -1", ""),
            "web.nomad.hcl:3:5: TaskGroups[0].Count: must not be negative (got -1)",
        ),
        (
            job_with("", "      kill_timeout = \"200h\""),
            "web.nomad.hcl:6:7: TaskGroups[0].Tasks[0].KillTimeout: ",
        ),
        (
            job_with(
                "    update {\n      min_healthy_time = \"5m\"\n      healthy_deadline = \"1m\"\n    }",
                "",
            ),
            "web.nomad.hcl:4:7: TaskGroups[0].Update.MinHealthyTime: Minimum healthy time must \
             be less than healthy deadline",
        ),
        (
            job_with(
                "    restart {\n      attempts = 1\n      mode     = \"bogus\"\n    }",
                "",
            ),
            "web.nomad.hcl:5:7: TaskGroups[0].RestartPolicy.Mode: Unsupported restart mode: \
             \"bogus\"",
        ),
    ];
    for (text, expected) in cases {
        let errors = validation_errors(&text);
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{text}\nexpected {expected}\ngot {errors:#?}"
        );
    }
}

#[test]
fn a_duplicate_task_name_is_placed_at_the_second_task_s_label() {
    let text =
        "job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n\
                \x20   task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n";
    assert_eq!(
        validation_errors(text),
        ["web.nomad.hcl:6:10: TaskGroups[0].Tasks[1].Name: duplicate task name \"t\""]
    );
}

#[test]
fn a_field_the_jobspec_did_not_write_is_placed_at_its_block() {
    // A task without a driver: the task block's header is the place.
    let text =
        "job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      user = \"root\"\n    }\n  }\n}\n";
    let errors = validation_errors(text);
    assert!(
        errors.contains(&"web.nomad.hcl:3:5: TaskGroups[0].Tasks[0].Driver: is required".into()),
        "{errors:#?}"
    );
    // A task directly under the job is its own group, placed at the task.
    let text =
        "job \"web\" {\n  type = \"service\"\n  task \"t\" {\n    kill_signal = \"SIGNOPE\"\n\
                \x20   driver = \"raw_exec\"\n  }\n}\n";
    assert_eq!(
        validation_errors(text),
        ["web.nomad.hcl:4:5: TaskGroups[0].Tasks[0].KillSignal: unknown signal \"SIGNOPE\""]
    );
}

#[test]
fn a_field_set_through_a_variable_is_placed_where_the_attribute_is() {
    let text = format!(
        "variable \"n\" {{\n  default = -3\n}}\n{}",
        job_with("    count = var.n", "")
    );
    let errors = validation_errors(&text);
    assert_eq!(
        errors,
        ["web.nomad.hcl:6:5: TaskGroups[0].Count: must not be negative (got -3)"]
    );
}
