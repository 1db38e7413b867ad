//! Unit tests of `declarations` (kept beside it so the module itself reads as one concern).

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn inline(schema: Value) -> String {
    Declaration::of(&schema).inline().unwrap_or_default()
}

#[test]
fn renders_every_construct() {
    assert_eq!(inline(json!({ "type": "string", "enum": ["a", "b"] })), r#""a" | "b""#);
    assert_eq!(inline(json!({ "const": 3 })), "3");
    assert_eq!(inline(json!({ "type": ["string", "null"] })), "string | null");
    assert_eq!(inline(json!({ "type": "integer", "nullable": true })), "number | null");
    assert_eq!(
        inline(json!({ "type": "array", "prefixItems": [{ "type": "string" }, { "type": "number" }], "items": false })),
        "[string?, number?]"
    );
    assert_eq!(
        inline(json!({ "type": "array", "items": [{ "type": "string" }], "additionalItems": { "type": "boolean" } })),
        "[string?, ...boolean[]]"
    );
    assert_eq!(
        inline(
            json!({ "type": "object", "properties": { "a": { "type": "string" }, "b-c": { "type": "number" } }, "required": ["a"] })
        ),
        r#"{ a: string; "b-c"?: number }"#
    );
    assert_eq!(
        inline(json!({ "type": "object", "additionalProperties": { "type": "number" } })),
        "{ [key: string]: number }"
    );
    assert_eq!(
        inline(json!({ "anyOf": [{ "type": "string" }, { "type": "array", "items": { "type": "number" } }] })),
        "string | number[]"
    );
    assert_eq!(
        inline(
            json!({ "allOf": [{ "type": "object", "properties": { "a": { "type": "string" } } }, { "type": "object", "properties": { "b": { "type": "number" } } }] })
        ),
        "{ a?: string } & { b?: number }"
    );
    assert_eq!(inline(json!({ "not": { "type": "string" } })), "unknown");
    assert_eq!(inline(json!(false)), "never");
}

#[test]
fn refs_become_named_aliases_and_cycles_end_at_the_name() {
    let d = Declaration::of(&json!({
        "$defs": { "node": { "type": "object", "properties": { "value": { "type": "number" }, "next": { "$ref": "#/$defs/node" } }, "required": ["value"] } },
        "type": "object", "properties": { "head": { "$ref": "#/$defs/node" } }
    }));
    assert_eq!(d.inline().as_deref(), Some("{ head?: Node }"));
    let (aliases, root) = d.render("  ", "List_", false).unwrap();
    assert_eq!(aliases, vec!["type List_Node = {\n    value: number;\n    next?: List_Node;\n  };".to_string()]);
    assert_eq!(root, "{\n    head?: List_Node;\n  }");
    assert!(d.accepts(&json!({ "head": { "value": 1, "next": { "value": 2 } } })));
    assert!(!d.accepts(&json!({ "head": { "next": { "value": 2 } } })));
    // A reference to the root, and one that points nowhere.
    assert_eq!(inline(json!({ "type": "object", "properties": { "child": { "$ref": "#" } } })), "{ child?: Self }");
    assert_eq!(inline(json!({ "$ref": "https://example.com/schema.json" })), "unknown");
}

#[test]
fn docs_carry_descriptions_and_constraints_and_cannot_break_out() {
    let d = Declaration::of(&json!({ "type": "object", "properties": {
        "q": { "type": "string", "description": "Search text */ declare const pwned: 1; /*\nsecond line", "minLength": 1, "pattern": "^a*/$" },
        "n": { "type": "integer", "minimum": 1, "maximum": 100, "default": 10 }
    }, "required": ["q"] }));
    let (_, root) = d.render("", "", false).unwrap();
    assert_eq!(
        root,
        "{\n  /**\n   * Search text *\\/ declare const pwned: 1; /*\n   * second line\n   * @pattern ^a*\\/$\n   * @minLength 1\n   */\n  q: string;\n  /**\n   * integer\n   * @minimum 1\n   * @maximum 100\n   * @default 10\n   */\n  n?: number;\n}"
    );
    assert_eq!(root.matches("*/").count(), 2, "only the comments' own ends: {root}");
}

#[test]
fn bounds_widen() {
    let mut deep = json!({ "type": "string" });
    for _ in 0..40 {
        deep = json!({ "type": "array", "items": deep });
    }
    let text = inline(deep);
    assert!(text.contains("unknown") && text.matches("[]").count() < MAX_DEPTH + 2, "{text}");
    let many: Vec<Value> = (0..200).map(|i| json!(format!("v{i}"))).collect();
    assert_eq!(inline(json!({ "enum": many })), "string");
    let wide: serde_json::Map<String, Value> = (0..3000)
        .map(|i| (format!("property_number_{i}"), json!({ "type": "string", "description": "x".repeat(50) })))
        .collect();
    let d = Declaration::of(&json!({ "type": "object", "properties": wide }));
    assert!(d.render("", "", false).is_none(), "over MAX_DECLARATION");
}

fn small_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(|n| json!(n)),
        Just(json!(1.5)),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({ "type": "string" })),
        Just(json!({ "type": "integer" })),
        Just(json!({ "type": "number", "minimum": 0 })),
        Just(json!({ "type": "boolean" })),
        Just(json!({ "type": "null" })),
        Just(json!({ "type": ["string", "null"] })),
        Just(json!({ "type": "string", "nullable": true })),
        Just(json!(true)),
        Just(json!({ "$ref": "#/$defs/Node" })),
        prop::collection::vec(small_value(), 1..4).prop_map(|v| json!({ "enum": v })),
        small_value().prop_map(|v| json!({ "const": v })),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|s| json!({ "type": "array", "items": s })),
            (prop::collection::vec(inner.clone(), 1..3), prop::option::of(inner.clone()), any::<bool>()).prop_map(
                |(p, rest, closed)| {
                    let mut s = json!({ "type": "array", "prefixItems": p });
                    match (rest, closed) {
                        (Some(r), _) => s["items"] = r,
                        (None, true) => s["items"] = json!(false),
                        (None, false) => {}
                    }
                    s
                }
            ),
            (
                prop::collection::btree_map("[a-c]", inner.clone(), 0..3),
                prop::collection::vec("[a-d]", 0..2),
                prop::option::of(prop_oneof![Just(json!(false)), Just(json!(true)), inner.clone()]),
            )
                .prop_map(|(props, required, extra)| {
                    let mut s = json!({ "type": "object", "properties": props, "required": required });
                    if let Some(e) = extra {
                        s["additionalProperties"] = e;
                    }
                    s
                }),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|a| json!({ "anyOf": a })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|a| json!({ "oneOf": a })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|a| json!({ "allOf": a })),
            inner.prop_map(|s| json!({ "not": s })),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// The declaration is never narrower than the schema — every value the schema
    /// accepts (checked by the jsonschema validator) fits the declared type.
    #[test]
    fn every_value_the_schema_accepts_fits_the_declaration(
        node in arb_schema(),
        body in arb_schema(),
        values in prop::collection::vec(small_value(), 1..24),
    ) {
        let mut schema = json!({ "$defs": { "Node": node } });
        if let (Value::Object(s), Value::Object(b)) = (&mut schema, &body) {
            for (k, v) in b {
                s.insert(k.clone(), v.clone());
            }
        } else {
            schema = json!({ "$defs": { "Node": node }, "allOf": [body] });
        }
        let Ok(validator) = jsonschema::validator_for(&schema) else { return Ok(()) };
        let declaration = Declaration::of(&schema);
        for v in values.iter().filter(|v| validator.is_valid(v)) {
            prop_assert!(declaration.accepts(v), "{} accepts {} but the declaration {:?} does not", schema, v, declaration.inline());
        }
    }
}

/// A reference cycle that consumes nothing (`Node = Node & Node`) is decided at once; it took
/// time exponential in the depth cap before (a proptest seed found it and hung the suite).
#[test]
fn self_referencing_intersections_do_not_explode() {
    let schema = json!({
        "$defs": { "Node": { "allOf": [{ "$ref": "#/$defs/Node" }, { "$ref": "#/$defs/Node" }, { "$ref": "#/$defs/Node" }] } },
        "allOf": [{ "$ref": "#/$defs/Node" }],
    });
    let d = Declaration::of(&schema);
    // The cycle constrains nothing: every value fits (this returned only after minutes before).
    for v in [json!(1), json!({"a": [1, 2, {"b": null}]}), json!([[[[]]]])] {
        assert!(d.accepts(&v), "{v}");
    }
}

/// The property above is not vacuous: on a fixed sample, schemas accept a good share of the
/// values, and the declarations accept all of those.
#[test]
fn the_property_sample_is_not_vacuous() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut total) = (0, 0);
    for _ in 0..300 {
        let schema = arb_schema().new_tree(&mut runner).unwrap().current();
        let schema = json!({ "$defs": { "Node": { "type": "string" } }, "allOf": [schema] });
        let Ok(validator) = jsonschema::validator_for(&schema) else { continue };
        let d = Declaration::of(&schema);
        for _ in 0..10 {
            let v = small_value().new_tree(&mut runner).unwrap().current();
            total += 1;
            if validator.is_valid(&v) {
                accepted += 1;
                assert!(d.accepts(&v), "{schema} {v}");
            }
        }
    }
    assert!(accepted * 10 > total, "only {accepted} of {total} sampled values were accepted");
}
