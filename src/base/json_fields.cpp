// json_fields.cpp: see json_fields.h.
#include "base/json_fields.h"

#include <fmt/format.h>

#include "base/check.h"  // ms::Error

namespace ms {

using nlohmann::json;

namespace {

// A value for an error message: its JSON text, cut to a readable length.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

}  // namespace

JsonFields::JsonFields(const json& obj, std::string where, std::string path)
    : obj_(obj), where_(std::move(where)), path_(std::move(path)) {
  if (obj_.is_object()) return;
  if (path_.empty()) MS_FAIL("{}: not a JSON object: {}", where_, shown(obj_));
  MS_FAIL("{}: field '{}' is not an object: {}", where_, path_, shown(obj_));
}

std::string JsonFields::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

const json* JsonFields::find(std::string_view key) const {
  const auto it = obj_.find(key);
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

const json& JsonFields::at(std::string_view key) const {
  const auto it = obj_.find(key);
  if (it == obj_.end()) fail(key, "is missing");
  return *it;
}

void JsonFields::fail_type(std::string_view key, std::string_view kind, const json& v) const {
  MS_FAIL("{}: field '{}' is not {}: {}", where_, path_of(key), kind, shown(v));
}

void JsonFields::fail(std::string_view key, std::string_view what) const {
  MS_FAIL("{}: field '{}' {}", where_, path_of(key), what);
}

int64_t JsonFields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const json& v = at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    fail_type(key, "an integer", v);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail(key, fmt::format("= {} is outside [{}, {}]", x, lo, hi));
  return x;
}

int64_t JsonFields::integer_or(std::string_view key, int64_t dflt, int64_t lo, int64_t hi) const {
  return has(key) ? integer(key, lo, hi) : dflt;
}

uint64_t JsonFields::unsigned_integer(std::string_view key) const {
  const json& v = at(key);
  if (!v.is_number_unsigned()) fail_type(key, "a non-negative integer", v);
  return v.get<uint64_t>();
}

double JsonFields::number(std::string_view key) const {
  const json& v = at(key);
  if (!v.is_number()) fail_type(key, "a number", v);
  return v.get<double>();
}

double JsonFields::number_or(std::string_view key, double dflt) const { return has(key) ? number(key) : dflt; }

std::string JsonFields::text(std::string_view key) const {
  const json& v = at(key);
  if (!v.is_string()) fail_type(key, "a string", v);
  return v.get<std::string>();
}

std::string JsonFields::text_or(std::string_view key, const std::string& dflt) const {
  return has(key) ? text(key) : dflt;
}

bool JsonFields::boolean(std::string_view key) const {
  const json& v = at(key);
  if (!v.is_boolean()) fail_type(key, "true or false", v);
  return v.get<bool>();
}

JsonFields JsonFields::object(std::string_view key) const {
  const json& v = at(key);
  if (!v.is_object()) fail_type(key, "an object", v);
  return JsonFields(v, where_, path_of(key));
}

const json& JsonFields::array(std::string_view key, bool non_empty) const {
  const json& v = at(key);
  if (!v.is_array() || (non_empty && v.empty())) fail_type(key, non_empty ? "a non-empty array" : "an array", v);
  return v;
}

}  // namespace ms
