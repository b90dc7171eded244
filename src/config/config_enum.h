// config_enum: enum-valued config fields. Each enum names its values once (MS_CONFIG_ENUM); the
// config loader parses the text into the enum when the file or command line is read, so no code
// past loading ever compares strings, and help text and error messages list the allowed values.
#pragma once
#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ms {

// Declares a field of the config tree: type name = default; /* doc */
#define MS_DECLARE_FIELD(type, name, def, doc) type name = def; /* doc */

template <class E>
struct ConfigEnum;  // specialised by MS_CONFIG_ENUM: static values() -> span of {value, name}

// MS_CONFIG_ENUM(Enum, {Enum::kA, "a"}, {Enum::kB, "b"}, ...): the names of an enum's values.
#define MS_CONFIG_ENUM(E, ...)                                                                   \
  template <>                                                                                    \
  struct ConfigEnum<E> {                                                                         \
    static constexpr std::pair<E, const char*> kValues[] = {__VA_ARGS__};                        \
    static constexpr std::span<const std::pair<E, const char*>> values() { return kValues; }     \
  };

template <class E, class = void>
struct is_config_enum : std::false_type {};
template <class E>
struct is_config_enum<E, std::void_t<decltype(ConfigEnum<E>::values())>> : std::true_type {};

// The config name of v ("?" for a value without one).
template <class E>
const char* config_name(E v) {
  for (const auto& [e, n] : ConfigEnum<E>::values())
    if (e == v) return n;
  return "?";
}

template <class E>
std::optional<E> parse_config_enum(std::string_view s) {
  for (const auto& [e, n] : ConfigEnum<E>::values())
    if (s == n) return e;
  return std::nullopt;
}

// "'a' or 'b'", "'a', 'b' or 'c'": the allowed values, for messages.
template <class E>
std::string config_choices() {
  std::string out;
  const auto vals = ConfigEnum<E>::values();
  size_t i = 0;
  for (const auto& [e, n] : vals) {
    if (i) out += (i + 1 == vals.size()) ? " or " : ", ";
    out += std::string("'") + n + "'";
    i++;
  }
  return out;
}

}  // namespace ms
