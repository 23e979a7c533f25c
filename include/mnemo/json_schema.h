// JSON Schema -> GBNF (include/mnemo/grammar.h), for structured output: the grammar accepts
// JSON texts (RFC 8259) that the schema accepts, in the subset below; anything else in a schema
// is refused by name rather than ignored.
//
// Supported (JSON Schema 2020-12 keywords): "type" (a name or a list), "const", "enum", "anyOf",
// "oneOf" (as anyOf), "allOf" of one schema, "$ref" to "#/$defs/NAME" or "#/definitions/NAME"
// (recursion allowed); objects: "properties" (emitted in the order given), "required",
// "additionalProperties": false (also what a schema with "properties" means when it is absent);
// arrays: "items", "minItems", "maxItems"; strings: "minLength", "maxLength". Annotations
// ("title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
// "readOnly", "writeOnly") are ignored. Numbers have at most 16 integer and 16 fraction digits
// and whitespace between tokens at most 20 characters, so a model cannot run on forever inside
// one value.
#pragma once

#include <string>
#include <string_view>

#include "mnemo/status.h"

namespace mnemo::grammar {

/// GBNF for `schema_json` (a JSON text holding a schema). Errors: InvalidArgument naming the
/// problem and where ("/properties/age: 'minimum' is not supported"), for malformed JSON, an
/// unsupported keyword or an unresolvable "$ref".
Result<std::string> json_schema_to_gbnf(std::string_view schema_json);

/// GBNF for any JSON value whose top level is an object (OpenAI's response_format json_object).
std::string json_object_gbnf();

}  // namespace mnemo::grammar
