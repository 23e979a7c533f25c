// Internal to the JSON Schema converter (json_schema.cc): a schema document checked against the
// supported subset (include/mnemo/json_schema.h), a schema evaluated on a JSON value with JSON
// Schema 2020-12's meaning for that subset, and what a schema's values can be (their JSON types,
// a finite list). The converter filters const/enum values by evaluating the keywords beside them,
// and proves oneOf branches disjoint with these before it treats oneOf as anyOf.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mnemo/status.h"

namespace mnemo::grammar::schema {

using Json = nlohmann::ordered_json;  // properties keep the schema's order

/// JSON types as bits (the type bits below). Numbers are split into integral values (kInt: 3, 1.0) and the others
/// (kFrac: 1.5), so "integer" is kInt and "number" is kInt | kFrac, as in JSON Schema.
constexpr unsigned kObject = 1;
constexpr unsigned kArray = 2;
constexpr unsigned kString = 4;
constexpr unsigned kInt = 8;
constexpr unsigned kFrac = 16;
constexpr unsigned kBool = 32;
constexpr unsigned kNull = 64;
constexpr unsigned kAllTypes = 127;

/// The bit of `v`'s JSON type.
unsigned type_bit(const Json& v);

/// The type bits a "type" keyword (a name or a list of names) allows; 0 for unknown names.
unsigned type_mask(const Json& type);

/// Equality as JSON Schema's const and enum mean it: numbers by value (1 == 1.0), objects whatever
/// their key order, booleans apart from numbers.
bool json_equal(const Json& a, const Json& b);

/// Code points in a UTF-8 string (what minLength and maxLength count).
size_t utf8_length(const std::string& s);

/// "json schema at WHERE: WHAT" (no " at WHERE" for the root) as InvalidArgument.
Status schema_error(const std::string& where, const std::string& what);

/// A JSON pointer token for a property name (RFC 6901: "~" -> "~0", "/" -> "~1").
std::string pointer_token(const std::string& name);

/// A schema document (the root, holding "$defs"/"definitions"). Holds a reference to `root`,
/// which must outlive it. check() first: the other methods assume a document it passed.
class Document {
 public:
  explicit Document(const Json& root) : root_(root) {}

  /// Checks every schema reachable from the root (through properties, items, anyOf, oneOf,
  /// allOf and $ref) against the supported subset. Errors: InvalidArgument naming the keyword and
  /// where ("json schema at /properties/a: 'format' is not supported"): an unknown keyword, a
  /// malformed value, an unresolvable "$ref", a "$ref" cycle that never enters a property or an
  /// item.
  Status check() const;

  /// The schema `ref` ("#/$defs/NAME" or "#/definitions/NAME") names, or nullptr.
  const Json* resolve(const std::string& ref) const;

  /// Whether `v` satisfies `s` (JSON Schema 2020-12 for the supported keywords).
  bool eval(const Json& s, const Json& v) const;

  /// A superset of the types of the values `s` accepts (type bits).
  unsigned types(const Json& s) const;

  /// A finite superset of the values `s` accepts, when its keywords give one (const, enum, or
  /// applicators whose schemas all do); nullopt when they do not.
  std::optional<std::vector<Json>> values(const Json& s) const;

  /// True when no value satisfies both `a` and `b`, proven from their types, a finite list of
  /// values of one of them, or (both objects) a property both require whose values one of them
  /// lists and the other rejects. False means unproven, not overlapping.
  bool disjoint(const Json& a, const Json& b) const;

 private:
  Status check_at(const Json& s, const std::string& where, std::vector<std::string>* refs) const;
  Status check_ref_cycles(const std::vector<std::string>& refs) const;
  void conjuncts(const Json& s, std::vector<const Json*>* out) const;
  bool told_apart(const Json& a, const Json& b) const;

  const Json& root_;
};

}  // namespace mnemo::grammar::schema
