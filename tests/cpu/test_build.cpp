// Checks the build's self-description: the instantiation list CMake generated is well formed and
// agrees with the dispatch table, so "what was compiled" and "what dispatch finds" cannot drift.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/instantiations.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/hopattn_c.h"

namespace hopattn {
namespace {

struct Instantiation {
  std::string direction, dtype;
  int head_dim;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

// "fwd|bwd|fp8:<dtype>:<head_dim>" (fp8: the output dtype); fails the test on any other shape.
std::vector<Instantiation> parse_instantiations() {
  std::vector<Instantiation> out;
  for (const std::string& entry : split(build_instantiations(), ',')) {
    const std::vector<std::string> f = split(entry, ':');
    EXPECT_EQ(f.size(), 3u) << "malformed entry '" << entry << "'";
    if (f.size() != 3) continue;
    EXPECT_TRUE(f[0] == "fwd" || f[0] == "bwd" || f[0] == "fp8") << entry;
    EXPECT_TRUE(f[1] == "bf16" || f[1] == "fp16") << entry;
    EXPECT_FALSE(f[2].empty()) << entry;
    EXPECT_EQ(f[2].find_first_not_of("0123456789"), std::string::npos) << entry;
    out.push_back({f[0], f[1], std::stoi(f[2])});
  }
  return out;
}

TEST(Build, InstantiationListIsWellFormed) {
  const std::string list = build_instantiations();
  ASSERT_FALSE(list.empty());
  EXPECT_NE(list.front(), ',');
  EXPECT_NE(list.back(), ',');
  EXPECT_EQ(list.find(",,"), std::string::npos);
  const std::vector<Instantiation> entries = parse_instantiations();
  ASSERT_FALSE(entries.empty());
  const std::vector<std::string> names = split(list, ',');
  const std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), entries.size()) << "duplicate entries in " << list;
  for (const Instantiation& e : entries) EXPECT_TRUE(e.head_dim == 64 || e.head_dim == 128 || e.head_dim == 256);
  EXPECT_STREQ(hopattn_build_instantiations(), build_instantiations());
}

TEST(Build, EveryListedKernelIsInTheDispatchTable) {
  for (const Instantiation& e : parse_instantiations()) {
    const DType t = e.dtype == "bf16" ? DType::kBF16 : DType::kFP16;
    if (e.direction == "bwd") {
      const BwdKernelEntry* k = find_backward_kernel(t, e.head_dim);
      ASSERT_NE(k, nullptr) << "bwd:" << e.dtype << ":" << e.head_dim << " is listed but not dispatchable";
      EXPECT_EQ(k->dtype, t);
      EXPECT_EQ(k->head_dim, e.head_dim);
      EXPECT_NE(k->launch, nullptr);
      // A backward kernel only makes sense next to its forward one (it needs lse and out).
      EXPECT_NE(find_forward_kernel(t, e.head_dim), nullptr) << e.dtype << ":" << e.head_dim;
      continue;
    }
    if (e.direction == "fp8") {
      const Fp8KernelEntry* k = find_fp8_kernel(t, e.head_dim);
      ASSERT_NE(k, nullptr) << "fp8:" << e.dtype << ":" << e.head_dim << " is listed but not dispatchable";
      EXPECT_EQ(k->dtype, t);
      EXPECT_EQ(k->head_dim, e.head_dim);
      EXPECT_NE(k->launch, nullptr);
      continue;
    }
    const FwdKernelEntry* k = find_forward_kernel(t, e.head_dim);
    ASSERT_NE(k, nullptr) << e.dtype << ":" << e.head_dim << " is listed but not dispatchable";
    EXPECT_EQ(k->dtype, t);
    EXPECT_EQ(k->head_dim, e.head_dim);
    EXPECT_NE(k->launch, nullptr);
  }
}

TEST(Build, UnlistedKernelsAreNotFound) {
  EXPECT_EQ(find_forward_kernel(DType::kBF16, 96), nullptr);
  EXPECT_EQ(find_forward_kernel(DType::kFP16, 96), nullptr);
  EXPECT_EQ(find_forward_kernel(DType::kFP32, 128), nullptr);
  EXPECT_EQ(find_forward_kernel(DType::kBF16, 0), nullptr);  // the table's sentinel row
  // Every (dtype, head dim) the table answers for is in the list.
  const std::string list = std::string(",") + build_instantiations() + ",";
  for (DType t : {DType::kBF16, DType::kFP16})
    for (int d : {64, 128, 256}) {
      const bool listed = list.find(std::string(",fwd:") + dtype_name(t) + ":" + std::to_string(d) + ",") != std::string::npos;
      EXPECT_EQ(has_forward_kernel(t, d), listed) << dtype_name(t) << ":" << d;
      const bool bwd_listed =
          list.find(std::string(",bwd:") + dtype_name(t) + ":" + std::to_string(d) + ",") != std::string::npos;
      EXPECT_EQ(has_backward_kernel(t, d), bwd_listed) << "bwd " << dtype_name(t) << ":" << d;
      const bool fp8_listed =
          list.find(std::string(",fp8:") + dtype_name(t) + ":" + std::to_string(d) + ",") != std::string::npos;
      EXPECT_EQ(has_fp8_kernel(t, d), fp8_listed) << "fp8 " << dtype_name(t) << ":" << d;
    }
  EXPECT_EQ(find_fp8_kernel(DType::kBF16, 96), nullptr);
  EXPECT_EQ(find_fp8_kernel(DType::kE4M3, 128), nullptr);  // keyed by the output dtype
  EXPECT_EQ(find_backward_kernel(DType::kBF16, 96), nullptr);
  EXPECT_EQ(find_backward_kernel(DType::kFP32, 128), nullptr);
}

TEST(Build, Version) {
  EXPECT_STRNE(version(), "");
  EXPECT_STREQ(hopattn_version(), version());
  EXPECT_EQ(hopattn_abi_version(), HOPATTN_ABI_VERSION);
}

TEST(Build, DtypeNamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kFP16), "fp16");
  EXPECT_STREQ(dtype_name(DType::kFP32), "fp32");
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kFP16), 2u);
  EXPECT_EQ(dtype_size(DType::kFP32), 4u);
}

}  // namespace
}  // namespace hopattn
