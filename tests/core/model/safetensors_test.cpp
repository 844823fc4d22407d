// Tests for core/model/safetensors: round trips, the exact on-disk layout, atomic replace,
// and clear errors for duplicate names and truncated or corrupt files.
#include "core/model/safetensors.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/model/gpt_model.hpp"
#include "core/model/layer_chunk.hpp"
#include "core/model/tensor_box_torch.hpp"

#include <catch2/catch.hpp>

namespace {

namespace fs = std::filesystem;

// Whether `dir` holds a write of save_safetensors' own still (its temporary file).
bool write_left_in(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(".actorpipe-write-", 0) == 0) return true;
  return false;
}
using actorpipe::box;
using actorpipe::load_safetensors;
using actorpipe::save_safetensors;
using actorpipe::tensor_box;
using actorpipe::unbox;

// A fresh directory per test case, removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag)
      : path(fs::temp_directory_path() / ("actorpipe_safetensors_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file made of a given header text and data section.
std::string file_with(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

at::Tensor randn(at::IntArrayRef shape, std::uint64_t seed) {
  return at::normal(0.0, 1.0, shape, at::detail::createCPUGenerator(seed), at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

CATCH_TEST_CASE("safetensors round trip keeps names, dtypes, shapes and bits", "[model][safetensors]") {
  temp_dir dir("roundtrip");
  const std::string path = dir.file("model.safetensors");
  const at::Tensor w = randn({3, 4}, 1);
  const at::Tensor scalar = at::full({}, 2.5f);
  const at::Tensor empty = at::zeros({0, 5});
  const at::Tensor ids = at::arange(6, at::TensorOptions().dtype(at::kLong)).view({2, 3});
  const at::Tensor strided = randn({4, 3}, 2).t();  // non-contiguous: written in logical order
  save_safetensors(path, {{"w", box(w)}, {"b.scalar", box(scalar)}, {"a.empty", box(empty)}, {"ids", box(ids)},
                          {"strided", box(strided)}});
  CATCH_CHECK_FALSE(write_left_in(dir.path.string()));

  const auto loaded = load_safetensors(path);
  CATCH_REQUIRE(loaded.size() == 5);
  const std::vector<std::string> names = {"a.empty", "b.scalar", "ids", "strided", "w"};  // name order
  const std::vector<at::Tensor> expected = {empty, scalar, ids, strided, w};
  for (std::size_t i = 0; i < names.size(); ++i) {
    CATCH_INFO("tensor " << names[i]);
    CATCH_CHECK(loaded[i].first == names[i]);
    const at::Tensor& t = unbox(loaded[i].second);
    CATCH_CHECK(t.scalar_type() == expected[i].scalar_type());
    CATCH_CHECK(t.sizes() == expected[i].sizes());
    CATCH_CHECK(torch::equal(t, expected[i]));
  }
}

// Through a symbolic link the file it names gets the tensors (the rename replaced the link with
// a file of its own, and the named file kept its old contents), as a write through it would.
CATCH_TEST_CASE("safetensors saved through a symbolic link replace the file it names", "[model][safetensors]") {
  temp_dir dir("linked");
  fs::create_directories(dir.file("elsewhere"));
  const std::string target = dir.file("elsewhere/model.safetensors"), link = dir.file("model.safetensors");
  std::ofstream(target) << "old";
  fs::create_symlink("elsewhere/model.safetensors", link);
  const at::Tensor w = randn({2, 3}, 3);
  save_safetensors(link, {{"w", box(w)}});
  CATCH_CHECK(fs::is_symlink(fs::symlink_status(link)));
  CATCH_CHECK(torch::equal(unbox(load_safetensors(target).at(0).second), w));
  CATCH_CHECK_FALSE(write_left_in(dir.file("elsewhere")));
  // A link to a file not written yet: it is written there.
  const std::string unwritten = dir.file("elsewhere/new.safetensors"), to_new = dir.file("new.safetensors");
  fs::create_symlink("elsewhere/new.safetensors", to_new);
  save_safetensors(to_new, {{"w", box(w)}});
  CATCH_CHECK(fs::is_symlink(fs::symlink_status(to_new)));
  CATCH_CHECK(fs::is_regular_file(unwritten));
}

CATCH_TEST_CASE("safetensors layout: LE header size, sorted JSON header, aligned packed data", "[model][safetensors]") {
  temp_dir dir("layout");
  const std::string path = dir.file("x.safetensors");
  const at::Tensor a = at::tensor({1.0f, 2.0f, 3.0f});
  const at::Tensor z = at::tensor({-1.0f});
  save_safetensors(path, {{"z", box(z)}, {"a", box(a)}});

  const std::string bytes = read_bytes(path);
  CATCH_REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CATCH_CHECK(n % 8 == 0);
  CATCH_REQUIRE(bytes.size() == 8 + n + 16);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CATCH_CHECK(header.dump() ==
              R"({"a":{"data_offsets":[0,12],"dtype":"F32","shape":[3]},"z":{"data_offsets":[12,16],"dtype":"F32","shape":[1]}})");
  float data[4];
  std::memcpy(data, bytes.data() + 8 + n, sizeof data);
  CATCH_CHECK(data[0] == 1.0f);
  CATCH_CHECK(data[2] == 3.0f);
  CATCH_CHECK(data[3] == -1.0f);
}

CATCH_TEST_CASE("safetensors save shows every byte it writes, in order, to its observer", "[model][safetensors]") {
  temp_dir dir("observed");
  const std::string path = dir.file("observed.safetensors");
  std::vector<std::pair<std::string, tensor_box>> tensors = {{"big", box(at::randn({3, 1 << 20}))},
                                                             {"small", box(at::arange(5, at::kLong))}};
  std::string seen;
  save_safetensors(path, tensors, [&](const char* data, std::size_t n) { seen.append(data, n); });
  CATCH_CHECK(seen.size() > (std::size_t{12} << 20));  // the 12 MiB tensor went by in pieces
  CATCH_CHECK(seen == read_bytes(path));
}

CATCH_TEST_CASE("safetensors save replaces the file whole and rejects bad names", "[model][safetensors]") {
  temp_dir dir("save");
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, {{"x", box(at::ones({2}))}});
  save_safetensors(path, {{"y", box(at::zeros({3}))}});
  const auto loaded = load_safetensors(path);
  CATCH_REQUIRE(loaded.size() == 1);
  CATCH_CHECK(loaded[0].first == "y");
  CATCH_CHECK_FALSE(write_left_in(dir.path.string()));

  CATCH_CHECK_THROWS_WITH(save_safetensors(path, {{"x", box(at::ones({2}))}, {"x", box(at::ones({2}))}}),
                          Catch::Contains("duplicate tensor name 'x'"));
  CATCH_CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", box(at::ones({2}))}}), Catch::Contains("reserved"));
  CATCH_CHECK_THROWS_WITH(save_safetensors(path, {{"u", tensor_box()}}), Catch::Contains("'u' is undefined"));
  CATCH_CHECK_THROWS_AS(save_safetensors(dir.file("no/such/dir/f.safetensors"), {{"x", box(at::ones({1}))}}),
                        std::runtime_error);
  // The failed saves left the earlier file alone.
  CATCH_CHECK(load_safetensors(path)[0].first == "y");
}

CATCH_TEST_CASE("safetensors load reports truncated and corrupt files by path", "[model][safetensors]") {
  temp_dir dir("corrupt");
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"a", box(randn({4, 4}, 3))}, {"b", box(randn({2}, 4))}});
  const std::string bytes = read_bytes(good);
  const std::string bad = dir.file("bad.safetensors");

  CATCH_CHECK_THROWS_WITH(load_safetensors(dir.file("missing.safetensors")), Catch::Contains("missing.safetensors"));
  // A device is not a file (it read as "truncated: 0 bytes").
  CATCH_CHECK_THROWS_WITH(load_safetensors("/dev/urandom"), "cannot read safetensors file '/dev/urandom': it is not a "
                                                            "regular file (a directory, device or pipe)");

  write_bytes(bad, bytes.substr(0, 5));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("bad.safetensors") && Catch::Contains("truncated"));
  write_bytes(bad, bytes.substr(0, 20));  // header cut short
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("bad.safetensors") && Catch::Contains("truncated"));
  write_bytes(bad, bytes.substr(0, bytes.size() - 3));  // data cut short
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("bad.safetensors") && Catch::Contains("truncated"));
  write_bytes(bad, bytes + "junk");
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("4 bytes after the last tensor"));
  write_bytes(bad, le64(1ull << 40) + bytes.substr(8));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("header size"));
  // What else a model download holds reads as what it is, not as a corrupt header.
  write_bytes(bad, std::string("PK\x03\x04\x14\x00\x00\x00", 8) + std::string(500, 'x'));  // pytorch_model.bin (zip)
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("is not a safetensors file but PyTorch's own format"));
  write_bytes(bad, std::string("\x80\x02\x8a\x0alz\xfc\x9c", 8) + std::string(64, 'x'));  // an old pickle
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("is not a safetensors file but PyTorch's own format"));
  write_bytes(bad, R"({"metadata": {}, "weight_map": {}})");
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("is not a safetensors file but JSON (a sharded"));

  const std::string four(16, '\0');
  write_bytes(bad, file_with("{not json}      ", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("bad.safetensors") && Catch::Contains("not valid JSON"));
  // A name or a dtype with a terminal's escape went to the terminal raw.
  write_bytes(bad, file_with("{\"a\\u001b[31m\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "xxxx"));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::EndsWith("is corrupt: a tensor's name holds control characters "
                                                                 "('a\\x1b[31m')"));
  write_bytes(bad, file_with("{\"t\":{\"dtype\":\"F\xe2\x80\xae\",\"shape\":[1],\"data_offsets\":[0,4]}}", "xxxx"));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::EndsWith("has a missing or unsupported dtype \"F\\xe2\\x80\\xae\""));
  // A byte of no UTF-8 in a string: the parser's message quoted it, raw, to the terminal.
  write_bytes(bad, file_with("{\"\xff\": 1}   ", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("not valid JSON") && Catch::Contains("\\xff") &&
                                                     !Catch::Contains("\xff"));
  write_bytes(bad, file_with(R"([1,2])", ""));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("not a JSON object"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("'t'") && Catch::Contains("dtype"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("bad dimension -4"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("spans 16 bytes") && Catch::Contains("need 12"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("truncated") && Catch::Contains("'t' ends at data byte 32"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("begin after end"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("overlap"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("hole"));
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[4]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::Contains("data_offsets"));
  // A name twice (the parser kept the last, and the first's bytes read as a hole).
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::EndsWith("is corrupt: its header names 't' twice"));
  // A key twice inside an entry, and nesting past a bound (the bad dtype's print in the message
  // overflowed the stack at 200,000 levels).
  write_bytes(bad, file_with(R"({"t":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::EndsWith("is corrupt: its header gives the key 'dtype' twice in one object"));
  write_bytes(bad, file_with(R"({"t":{"dtype":)" + std::string(200000, '[') + std::string(200000, ']') +
                                 R"(,"shape":[4],"data_offsets":[0,16]}})",
                             four));
  CATCH_CHECK_THROWS_WITH(load_safetensors(bad), Catch::EndsWith("is corrupt: its header nests deeper than 100 levels"));
  // Many entries read in linear time (the duplicate check scanned each object's parent at its
  // end: 400,000 names took minutes); here every name is read and the holes are found.
  {
    std::string many = R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})";
    for (int i = 0; i < 100000; ++i) many += ",\"z" + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    write_bytes(bad, file_with(many + "}", four));
    CATCH_CHECK(load_safetensors(bad).size() == 100001);
  }

  // Files from other writers may carry __metadata__; it is skipped.
  write_bytes(bad, file_with(R"({"__metadata__":{"format":"pt"},"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", four));
  const auto loaded = load_safetensors(bad);
  CATCH_REQUIRE(loaded.size() == 1);
  CATCH_CHECK(torch::equal(unbox(loaded[0].second), at::zeros({2, 2})));
}

CATCH_TEST_CASE("a chunk's parameters survive a safetensors round trip", "[model][safetensors]") {
  temp_dir dir("chunk");
  actorpipe::train_options o;
  o.model.vocab = 32;
  o.model.seq_len = 8;
  o.model.hidden = 16;
  o.model.heads = 2;
  o.model.layers = 3;
  auto gpt = std::make_shared<const actorpipe::model_definition>(actorpipe::gpt_model(o));
  actorpipe::chunk_spec s;
  s.layer_begin = 0;
  s.layer_end = static_cast<int>(gpt->layers.size());
  s.first = s.last = true;
  actorpipe::layer_chunk model(gpt, s);
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, model.named_parameters());
  const auto loaded = load_safetensors(path);
  std::map<std::string, at::Tensor> by_name;
  for (const auto& p : loaded) by_name[p.first] = unbox(p.second);
  const auto params = model.named_parameters();
  CATCH_CHECK(by_name.size() == params.size());
  for (const auto& [name, t] : params) {
    CATCH_INFO("parameter " << name);
    CATCH_REQUIRE(by_name.count(name));
    CATCH_CHECK(torch::equal(by_name.at(name), unbox(t)));
  }
}

CATCH_TEST_CASE("safetensors saved to one path at once come out as one whole save, beside a user's .tmp file untouched",
                "[model][safetensors]") {
  // Every save wrote `path.tmp`: two at once wrote into one file (it held some tensors of
  // each), a user's file of that name was replaced (and a link of that name written through).
  temp_dir dir("shared");
  const std::string path = dir.file("w.safetensors");
  std::ofstream(path + ".tmp") << "notes";
  std::vector<std::pair<std::string, tensor_box>> a, b;
  for (int i = 0; i < 24; ++i) {
    a.emplace_back("t" + std::to_string(i), box(at::full({64, 1024}, static_cast<float>(i))));
    b.emplace_back("t" + std::to_string(i), box(at::full({64, 1024}, static_cast<float>(-i - 1))));
  }
  for (int round = 0; round < 6; ++round) {
    std::thread other([&] { save_safetensors(path, b); });
    save_safetensors(path, a);
    other.join();
    const auto loaded = load_safetensors(path);
    CATCH_REQUIRE(loaded.size() == 24);
    std::map<std::string, at::Tensor> got;
    for (const auto& [name, t] : loaded) got[name] = unbox(t);
    const float first = got.at("t0").flatten()[0].item<float>();
    CATCH_REQUIRE((first == 0.0f || first == -1.0f));
    const auto& whole = first == 0.0f ? a : b;  // all of one save
    for (const auto& [name, t] : whole) CATCH_CHECK(torch::equal(got.at(name), unbox(t)));
  }
  CATCH_CHECK_FALSE(write_left_in(dir.path.string()));
  std::ifstream notes(path + ".tmp");
  CATCH_CHECK(std::string(std::istreambuf_iterator<char>(notes), {}) == "notes");
  // A name near the limit (255 bytes): the temporary name was 4 bytes longer, past it.
  const std::string longest = dir.file(std::string(250, 'n') + ".st");
  save_safetensors(longest, a);
  CATCH_CHECK(load_safetensors(longest).size() == 24);
}

CATCH_TEST_CASE("safetensors saves keep a file's permissions and remove what a killed save on this host left",
                "[model][safetensors]") {
  temp_dir dir("leftovers");
  const std::string path = dir.file("private.safetensors");
  save_safetensors(path, {{"x", box(at::ones({2}))}});
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);  // 0600: it came back 0644
  // What a save killed midway leaves, named as this host's: of a process that is gone, of one
  // that lives (this one: a save going on), and another host's (a shared folder).
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::uint32_t h = 2166136261u;
  for (const char* c = host; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", h);
  const std::string gone = dir.file(".actorpipe-write-" + std::string(tag) + "-2147483000-0badf00d");
  const std::string alive = dir.file(".actorpipe-write-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-0badf00d");
  const std::string elsewhere = dir.file(".actorpipe-write-" + std::string(h == 0 ? "00000001" : "00000000") + "-2147483000-0badf00d");
  for (const auto& f : {gone, alive, elsewhere}) std::ofstream(f) << "partial";
  save_safetensors(path, {{"y", box(at::zeros({3}))}});
  CATCH_CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  CATCH_CHECK(load_safetensors(path).at(0).first == "y");
  CATCH_CHECK_FALSE(fs::exists(gone));
  CATCH_CHECK(fs::exists(alive));
  CATCH_CHECK(fs::exists(elsewhere));
}
