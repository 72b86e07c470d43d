// accord-settings: the table of settings (runtime/settings.def) for what is not C++.
//
//   accord-settings --json                 the table, for accordrun's flags
//   accord-settings --check NAME=VALUE...  parse as init() would; the error, exit 2
//   accord-settings --markdown             the table for docs/configuration.md
//   accord-settings --update-docs FILE     rewrite that table in FILE
//   accord-settings --check-docs FILE      exit 1 where FILE's table is not the table's
//
// accordrun runs --json to build its flags and --check to refuse a bad flag value before
// starting mpirun, with the message and range init() would give; the documentation's
// table is regenerated (ninja docs-settings) and checked (test tools.settings-docs).
// Built from config.cc itself, without MPI, so it starts in a few milliseconds.
#include "runtime/config.h"
#include "runtime/config_reader.h"
#include "runtime/settings.h"

#include <accord/error.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace accord::settings;
namespace reader = accord::config_reader;

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::Bytes: return "bytes";
    case Kind::Count: return "count";
    case Kind::Milliseconds: return "milliseconds";
    case Kind::Seconds: return "seconds";
    case Kind::LogLevel: return "log level";
    case Kind::Text: return "text";
    case Kind::Path: return "path";
    case Kind::List: return "list";
  }
  return "";
}

nlohmann::json tableJson() {
  auto settings = nlohmann::json::array();
  for (const auto& s : kTable) {
    settings.push_back({{"name", s.name},
                        {"horovod", s.horovod},
                        {"kind", kindName(s.kind)},
                        {"default", s.fallback},
                        {"agree", s.has(kAgree)},
                        {"tuned", s.has(kTuned)},
                        {"autotune_only", s.has(kAutotuneOnly)},
                        {"flag", s.flag},
                        {"example", s.example},
                        {"expected", reader::expected(s)},
                        {"doc", s.doc}});
  }
  return settings;
}

// accordrun's flag as a user types it: "--cycle-time VALUE", or "--autotune" (a switch).
std::string flagUsage(const Setting& s) {
  const std::string flag = s.flag;
  if (flag.empty()) return "";
  const auto eq = flag.find('=');
  if (eq != std::string::npos) return "`" + flag.substr(0, eq) + "`";
  return "`" + flag + " " + (s.kind == Kind::Path ? "FILE" : "VALUE") + "`";
}

std::string ranks(const Setting& s) {
  if (!s.has(kAgree)) return s.has(kTuned) ? "whether set, when tuning" : "";
  if (s.has(kAutotuneOnly)) return "must agree, when tuning";
  if (s.has(kGivenAgrees)) return "must agree, and whether set";
  if (s.has(kTuned)) return "must agree, and whether set when tuning";
  return "must agree";
}

std::string markdownTable() {
  std::ostringstream out;
  out << "| variable | default | accepts | ranks | autotune | accordrun | Horovod's name | "
         "what it does |\n"
      << "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& s : kTable) {
    const std::string fallback = *s.fallback ? std::string("`") + s.fallback + "`" : "(unset)";
    const std::string horovod = *s.horovod ? std::string("`") + s.horovod + "`" : "";
    const std::string autotune = s.has(kTuned)         ? "tuned where not set"
                                 : s.has(kAutotuneOnly) ? "read only when tuning"
                                                        : "";
    std::string accepts = reader::expected(s);
    if ((s.kind == Kind::Text || s.kind == Kind::Path) && *s.values)
      accepts += "; unset: " + std::string(s.values);
    out << "| `" << s.name << "` | " << fallback << " | " << accepts << " | " << ranks(s)
        << " | " << autotune << " | " << flagUsage(s) << " | " << horovod << " | " << s.doc
        << " |\n";
  }
  return out.str();
}

constexpr const char* kBegin =
    "<!-- settings table: made by `accord-settings --markdown` from runtime/settings.def; "
    "`ninja docs-settings` rewrites it -->\n";
constexpr const char* kEnd = "<!-- end of settings table -->\n";

// FILE's text with the table between the markers replaced by the current one, or ""
// where the markers are missing.
std::string withTable(const std::string& text) {
  const auto begin = text.find(kBegin);
  const auto end = text.find(kEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  const auto from = begin + std::string(kBegin).size();
  return text.substr(0, from) + markdownTable() + text.substr(end);
}

int docs(const std::string& path, bool update) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "accord-settings: cannot read " << path << "\n";
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string wanted = withTable(text);
  if (wanted.empty()) {
    std::cerr << "accord-settings: " << path << " has no settings table between the lines\n"
              << kBegin << kEnd;
    return 1;
  }
  if (wanted == text) return 0;
  if (!update) {
    std::cerr << "accord-settings: the settings table in " << path
              << " is not the one runtime/settings.def makes: run `ninja docs-settings` and "
                 "commit it\n";
    return 1;
  }
  std::ofstream out(path, std::ios::binary);
  out << wanted;
  out.close();
  if (out) return 0;
  std::cerr << "accord-settings: cannot write " << path << "\n";
  return 1;
}

// NAME=VALUE arguments parsed as init() parses its environment.
int check(const std::vector<std::string>& assignments) {
  std::map<std::string, std::string> env;
  for (const auto& a : assignments) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "accord-settings: --check takes NAME=VALUE, got '" << a << "'\n";
      return 1;
    }
    env[a.substr(0, eq)] = a.substr(eq + 1);
  }
  try {
    accord::Config::parse([&](const char* var) -> const char* {
      auto it = env.find(var);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  } catch (const accord::InvalidArgument& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  // What init() warns about, which it then ignores: a misspelt name, a Horovod setting
  // Accord does not read.
  const auto unknown = accord::Config::unknownVariables(assignments);
  for (const auto& name : unknown)
    std::cerr << "accord-settings: warning: " << name
              << " is not an Accord variable; init() ignores it\n";
  for (const auto& note : accord::Config::unreadHorovodVariables(assignments))
    std::cerr << "accord-settings: warning: " << note << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Accord's settings table (runtime/settings.def), for accordrun and the docs"};
  bool json = false, markdown = false;
  std::vector<std::string> assignments;
  std::string update, verify;
  auto* modes = app.add_option_group("mode");
  modes->add_flag("--json", json, "print the table as JSON");
  modes->add_flag("--markdown", markdown, "print the table as Markdown");
  modes->add_option("--check", assignments, "NAME=VALUE...: parse as init() would")
      ->expected(0, -1);
  modes->add_option("--update-docs", update, "rewrite the settings table in this file");
  modes->add_option("--check-docs", verify, "exit 1 where this file's table differs");
  modes->require_option(1);
  CLI11_PARSE(app, argc, argv);
  if (json) {
    std::cout << tableJson().dump(1) << "\n";
    return 0;
  }
  if (markdown) {
    std::cout << markdownTable();
    return 0;
  }
  if (!update.empty()) return docs(update, true);
  if (!verify.empty()) return docs(verify, false);
  return check(assignments);
}
