// Name validation: names cannot escape /dev/shm and every bad name says why.
#include <doctest/doctest.h>

#include <string>

#include "shmbox/shmbox.hpp"

TEST_CASE("names: valid ones pass") {
  const std::string names[] = {"a", "jobs", "Jobs-2.queue_x", "0", std::string(128, 'n')};
  for (const auto& n : names) CHECK_MESSAGE(shmbox::Box::validate_name(n).has_value(), n);
}

TEST_CASE("names: invalid ones fail with invalid_name and a reason") {
  struct bad_name {
    std::string name;
    const char* reason;
  };
  const bad_name cases[] = {
      {"", "empty"},
      {std::string(129, 'n'), "129 characters"},
      {".hidden", "starts with '.'"},
      {"..", "starts with '.'"},
      {"a/b", "'/'"},
      {"../../etc/passwd", "starts with '.'"},
      {"sp ace", "0x20"},
      {"t\xc3\xa4st", "0xc3"},
      {std::string("nul\0x", 5), "0x00"},
  };
  for (const auto& c : cases) {
    auto r = shmbox::Box::validate_name(c.name);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == shmbox::errc::invalid_name);
    const std::string why = shmbox::explain(r.error());
    CHECK_MESSAGE(why.find(c.reason) != std::string::npos, why);
    CHECK(why.find("A-Z a-z 0-9") != std::string::npos);  // says what to do
    // Every entry point refuses it the same way.
    CHECK(shmbox::Box::create(c.name).error() == shmbox::errc::invalid_name);
    CHECK(shmbox::Box::open(c.name).error() == shmbox::errc::invalid_name);
    CHECK(shmbox::Box::remove(c.name).error() == shmbox::errc::invalid_name);
  }
}
