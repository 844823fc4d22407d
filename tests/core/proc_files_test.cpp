// The /proc and cgroup reader doctor and the room checks share.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/proc_files.hpp"

using namespace actorpipe;

CATCH_TEST_CASE("a key : value file is read once, the first value of each key kept", "[proc]") {
  const std::string path = "/tmp/actorpipe_proc_files_" + std::to_string(getpid());
  {
    std::ofstream out(path);
    out << "processor\t: 0\nmodel name\t: Some CPU  \ncpu MHz\t\t: 2600.000\nempty\t:\nno colon here\n"
           "processor\t: 1\nmodel name\t: Another CPU\n";
  }
  const auto values = proc_values(path);
  CATCH_CHECK(value_of(values, "model name") == "Some CPU  ");
  CATCH_CHECK(value_of(values, "cpu MHz") == "2600.000");
  CATCH_CHECK(value_of(values, "processor") == "0");
  CATCH_CHECK(value_of(values, "empty").empty());
  CATCH_CHECK(value_of(values, "no colon here").empty());
  CATCH_CHECK(proc_value(path, "model name") == "Some CPU  ");
  CATCH_CHECK(first_line(path) == "processor\t: 0");
  std::remove(path.c_str());
  CATCH_CHECK(proc_values(path).empty());
  CATCH_CHECK(first_line(path).empty());
}

CATCH_TEST_CASE("meminfo in bytes, as the kernel counts it", "[proc]") {
  const double total = meminfo_bytes("MemTotal");
  CATCH_CHECK(total > 64.0 * 1024 * 1024);
  CATCH_CHECK(static_cast<long long>(total) % 1024 == 0);  // kB, times 1024
  CATCH_CHECK(meminfo_bytes("MemAvailable") <= total);
  CATCH_CHECK(meminfo_bytes("NoSuchKey") == 0);
  CATCH_CHECK(cgroup_bytes("no.such.setting") == 0);
}
