// fuzz/cli_fuzz.cpp - libFuzzer harness over the shmbox command line's parser.
//
// The input is split on '\0' into arguments (argv[0] is "shmbox") and handed
// to shmbox_cli::parse_args, which only parses: it creates, opens and removes
// nothing. Help, version and usage errors are printed to std::cout/std::cerr,
// which are silenced here. parse_args must return -1 (a command to run), 0
// or 2; anything else, an exception or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli_args.hpp"

namespace {

struct null_buf : std::streambuf {
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

null_buf g_null;

constexpr std::size_t kMaxArgs = 64;

}  // namespace

extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::getenv("CLI_FUZZ_VERBOSE") == nullptr) {
    std::cout.rdbuf(&g_null);
    std::cerr.rdbuf(&g_null);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"shmbox"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\0') {
      args.push_back(cur);
      cur.clear();
      if (args.size() > kMaxArgs) return -1;
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (size > 0) args.push_back(cur);  // the last argument needs no terminator (a trailing '\0' adds an empty one)
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  shmbox_cli::parsed out;
  const int rc = shmbox_cli::parse_args(static_cast<int>(args.size()), argv.data(), out);
  if (rc != -1 && rc != shmbox_cli::kExitOk && rc != shmbox_cli::kExitUsage) {
    std::fprintf(stderr, "cli_fuzz: parse_args returned %d\n", rc);
    std::abort();
  }
  if (rc == -1 && out.cmd == shmbox_cli::command::none) {
    std::fprintf(stderr, "cli_fuzz: parse_args returned -1 without a command\n");
    std::abort();
  }
  return 0;
}
