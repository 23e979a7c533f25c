// JSON Schema -> GBNF (include/mnemo/grammar.h), for structured output. The promise: every text
// the grammar accepts is a JSON text (RFC 8259) that the schema accepts (JSON Schema 2020-12);
// a schema the converter cannot hold exactly is refused by name, never loosened. The grammar may
// accept less than the schema (below: where and why).
//
// Supported keywords: "type" (a name or a list), "const", "enum", "anyOf", "oneOf", "allOf" of one
// schema, "$ref" to "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed when it goes
// through a property or an item); objects: "properties" (emitted in the order given),
// "required", "additionalProperties": false; arrays: "items", "minItems", "maxItems"; strings:
// "minLength", "maxLength". Annotations ("title", "description", "default", "examples",
// "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly") are ignored. Anything else
// is an error naming the keyword ("'pattern' is not supported").
//
// Keywords combine as JSON Schema says: all of a schema's keywords hold. Beside "const"/"enum",
// any keyword is exact: the values are kept that the whole schema accepts (evaluated). Beside
// "anyOf"/"oneOf"/"allOf"/"$ref", the other keywords are intersected with each branch (types
// intersect, the tightest bounds hold, a property's value meets every schema given for it).
// "oneOf" is exact when no value can match two branches, proven pairwise: branches of different
// types, branches that list their values (const/enum; a value in two is dropped), a listing
// branch whose values the other rejects, or objects that both require a property whose
// const/enum tells them apart; other oneOfs are refused ("'oneOf' whose branches may overlap
// (0 and 1) is not supported"). A schema no value satisfies is refused ("accepts nothing").
//
// Narrower than the schema, by design: an object schema with "properties" or "required" and no
// "additionalProperties" takes only the keys named there (a "required" key with no "properties"
// entry takes any value), and one with neither takes any object; a "required" name missing from
// the same schema's "properties" is refused as a likely slip. Without "type", the type-specific
// keywords name the type ("properties" means an object, "minLength" a string; when no value of
// those types meets them, the grammar takes the values of the other types, as the schema does).
// const/enum values are written as their compact JSON text; numbers have at most 16 integer and
// 16 fraction digits; \u escapes of surrogates are not used (such characters come as UTF-8: a
// pair of escapes would be one character for minLength); whitespace between tokens is at most 20
// characters, so a model cannot run on forever inside one value.
#pragma once

#include <string>
#include <string_view>

#include "mnemo/status.h"

namespace mnemo::grammar {

/// GBNF for `schema_json` (a JSON text holding a schema); its rules are named "root", the JSON
/// value rules ("value", "string", ...) and "s-N". Errors: InvalidArgument naming the problem and
/// where ("json schema at /properties/age: 'minimum' is not supported"): malformed JSON, an
/// unsupported keyword (the message then holds "is not supported" or "is supported ..."), a
/// malformed keyword, an unresolvable "$ref" or one that comes back to itself without entering a
/// property or an item, a oneOf not proven exact, a schema that accepts nothing.
Result<std::string> json_schema_to_gbnf(std::string_view schema_json);

/// GBNF for any JSON value whose top level is an object (OpenAI's response_format json_object).
std::string json_object_gbnf();

}  // namespace mnemo::grammar
