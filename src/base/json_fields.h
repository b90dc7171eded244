// json_fields: checked reading of the fields of a JSON object (nlohmann-json), the one way the readers
// of files and messages (checkpoint manifests, record files, hang dumps, heartbeat messages) take a
// typed field. Every error is an ms::Error naming the source, the field's path and what it must be:
//   "<where>: field '<path>' is missing"
//   "<where>: field '<path>' is not <an integer | a number | a string | an object | ...>: <value>"
//   "<where>: field '<path>' = <value> is outside [<lo>, <hi>]"
// Guarantees: a required field that is absent is an error, as is a required one that is null; an
// optional one (the *_or forms, read_or_keep) that is absent or null gives the default. Paths join
// with '.' ("model.n_layer", "ms.forward"). A JsonFields refers to its object: keep that alive.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms {

// What a JSON value of C++ type T is, for errors: "an integer", "a string", ...
template <class T>
constexpr std::string_view json_kind() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_convertible_v<T, std::string_view>) return "a string";
  else return "of the expected type";
}

class JsonFields {
 public:
  // The fields of obj, read from `where` (a file, "file:line", "heartbeat message"); path: obj's own
  // path in the document ("" at the top). obj must be an object: "<where>: not a JSON object" at the
  // top, else "field '<path>' is not an object".
  JsonFields(const nlohmann::json& obj, std::string where, std::string path = {});

  const std::string& where() const { return where_; }
  const std::string& path() const { return path_; }
  // "<path>.<key>" (just key at the top).
  std::string path_of(std::string_view key) const;
  // Present and not null.
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // The value; nullptr when absent or null.
  const nlohmann::json* find(std::string_view key) const;
  // The value of a required field (null included).
  const nlohmann::json& at(std::string_view key) const;

  int64_t integer(std::string_view key, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) const;
  int64_t integer_or(std::string_view key, int64_t dflt, int64_t lo = std::numeric_limits<int64_t>::min(),
                     int64_t hi = std::numeric_limits<int64_t>::max()) const;
  uint64_t unsigned_integer(std::string_view key) const;
  double number(std::string_view key) const;
  double number_or(std::string_view key, double dflt) const;
  std::string text(std::string_view key) const;
  std::string text_or(std::string_view key, const std::string& dflt) const;
  bool boolean(std::string_view key) const;
  // A field that is an object, to read its own fields (path: path_of(key)).
  JsonFields object(std::string_view key) const;
  // A field that is an array (`non_empty`: and not empty).
  const nlohmann::json& array(std::string_view key, bool non_empty = false) const;

  // Any type nlohmann converts to (maps, vectors, the caller's from_json types): a value of another
  // type is "is not <json_kind<T>()>". get: required; get_or: absent or null gives dflt; read_or_keep:
  // absent or null leaves out as it is.
  template <class T>
  T get(std::string_view key) const {
    return convert<T>(key, at(key));
  }
  template <class T>
  T get_or(std::string_view key, T dflt) const {
    read_or_keep(key, dflt);
    return dflt;
  }
  template <class T>
  void read_or_keep(std::string_view key, T& out) const {
    if (const nlohmann::json* v = find(key)) out = convert<T>(key, *v);
  }

  // The type error of field `key` holding v ("is not <kind>: <v>").
  [[noreturn]] void fail_type(std::string_view key, std::string_view kind, const nlohmann::json& v) const;
  // Any other error about field `key`: "<where>: field '<path>' <what>".
  [[noreturn]] void fail(std::string_view key, std::string_view what) const;

 private:
  template <class T>
  T convert(std::string_view key, const nlohmann::json& v) const {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      fail_type(key, json_kind<T>(), v);
    }
  }
  const nlohmann::json& obj_;
  std::string where_, path_;
};

}  // namespace ms
