// What Linux says of the machine and of this process's cgroup, read from /proc and
// /sys/fs/cgroup: one reader for `actorpipe doctor` and for the room checks before a run.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace actorpipe {

// Every "key : value" line of a file such as /proc/cpuinfo or /proc/meminfo, the first value
// of each key (/proc/cpuinfo repeats its keys for every CPU), in one read; empty where the file
// is unreadable.
std::map<std::string, std::string> proc_values(const std::string& path);

// The value of `key` in such a file; "" where it is missing.
std::string proc_value(const std::string& path, const std::string& key);

// The value of `key` among values read by proc_values; "" where it is missing.
std::string value_of(const std::map<std::string, std::string>& values, const std::string& key);

// The first line of a file (a sysctl, a cgroup setting); "" where it is unreadable.
std::string first_line(const std::string& path);

// /proc/meminfo's `key` ("MemTotal", "CommitLimit") in bytes; 0 where it is missing.
double meminfo_bytes(const std::string& key);

// Where this process was started through the dynamic loader (`ld-linux-x86-64.so.2 [its
// options] program args...`, a way to pick libraries without changing the system), the
// loader's options and the program's path, as given, which come before the program's own
// arguments (main's argv[1..]); empty otherwise. /proc/self/exe is then the loader: starting it
// again with argv alone ran the loader on the first argument ("train: cannot open shared
// object file"). Empty too where argv[1..] are not the process's own arguments.
std::vector<std::string> loader_arguments(int argc, const char* const* argv);

// A cgroup v2 setting of this process in bytes ("memory.max"); 0 where it is "max" (no limit)
// or missing.
double cgroup_bytes(const std::string& file);

}  // namespace actorpipe
