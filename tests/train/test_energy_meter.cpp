// The one RAPL meter (train/energy_meter.h) on a fake powercap tree: package zones only,
// wraparound, unavailable cases; the study's EnergyMeter is the same class.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <type_traits>

#include "common/temp_dir.h"
#include "mixp/study/energy_meter.h"
#include "mixp/train/energy_meter.h"

namespace mixp::train {
namespace {

namespace fs = std::filesystem;
using mixp::test::TempDir;
using mixp::test::write_text;

void zone(const fs::path& root, const std::string& dir, const std::string& name, uint64_t uj,
          uint64_t max_range) {
  fs::create_directories(root / dir);
  write_text(root / dir / "name", name + "\n");
  write_text(root / dir / "energy_uj", std::to_string(uj) + "\n");
  write_text(root / dir / "max_energy_range_uj", std::to_string(max_range) + "\n");
}

void set_energy(const fs::path& root, const std::string& dir, uint64_t uj) {
  write_text(root / dir / "energy_uj", std::to_string(uj) + "\n");
}

TEST(CounterDelta, Wraparound) {
  EXPECT_EQ(counter_delta(100, 250, 1000), 150u);
  EXPECT_EQ(counter_delta(900, 50, 1000), 150u);  // (1000 - 900) + 50
  // Unknown range (or one below the previous reading): only what follows the wrap is known.
  EXPECT_EQ(counter_delta(900, 50, 0), 50u);
  EXPECT_EQ(counter_delta(900, 50, 800), 50u);
  EXPECT_EQ(counter_delta(5, 5, 1000), 0u);
}

static_assert(std::is_same_v<study::RaplEnergyMeter, EnergyMeter>,
              "the study and the Trainer share one meter");

TEST(RaplMeter, SumsPackagesOnlyAcrossWraparound) {
  TempDir t;
  const fs::path root = t.path();
  zone(root, "intel-rapl:0", "package-0", 1000, 10000);
  zone(root, "intel-rapl:0:0", "core", 500, 10000);    // part of package 0
  zone(root, "intel-rapl:0:1", "dram", 700, 10000);    // subzone
  zone(root, "intel-rapl:1", "psys", 99999, 1000000);  // the whole platform
  zone(root, "intel-rapl:2", "package-1", 2000, 5000);
  zone(root, "intel-rapl-mmio:0", "package-0", 42, 10000);  // mirror of the MSR zone
  EnergyMeter m(root);
  ASSERT_TRUE(m.available()) << m.unavailable_reason();
  EXPECT_EQ(m.source(), "rapl");
  EXPECT_EQ(m.zone_names(), (std::vector<std::string>{"package-0", "package-1"}));
  m.start();

  set_energy(root, "intel-rapl:0", 9000);    // +8000
  set_energy(root, "intel-rapl:0:0", 9999);  // ignored
  set_energy(root, "intel-rapl:1", 5);       // ignored
  set_energy(root, "intel-rapl:2", 4500);    // +2500
  m.sample();
  set_energy(root, "intel-rapl:0", 500);   // wrapped: (10000 - 9000) + 500 = +1500
  set_energy(root, "intel-rapl:2", 4500);  // +0
  auto j = m.joules();
  ASSERT_TRUE(j);
  EXPECT_NEAR(*j, (8000 + 2500 + 1500) * 1e-6, 1e-12);

  m.start();  // restarts from the current values
  EXPECT_NEAR(*m.joules(), 0.0, 1e-12);
}

TEST(RaplMeter, UnavailableSaysWhy) {
  TempDir t;
  EnergyMeter missing(t.path() / "no-such-dir");
  EXPECT_FALSE(missing.available());
  EXPECT_EQ(missing.source(), "unavailable");
  EXPECT_NE(missing.unavailable_reason().find("containers"), std::string::npos);
  EXPECT_FALSE(missing.joules());

  EnergyMeter empty(t.path());
  EXPECT_FALSE(empty.available());
  EXPECT_NE(empty.unavailable_reason().find("no RAPL package zones"), std::string::npos);

  zone(t.path(), "intel-rapl:0", "package-0", 0, 100);
  write_text(t.path() / "intel-rapl:0" / "energy_uj", "garbage\n");
  EnergyMeter bad(t.path());
  EXPECT_FALSE(bad.available());
  EXPECT_NE(bad.unavailable_reason().find("does not hold a number"), std::string::npos);
}

TEST(RaplMeter, UnreadableCounterMentionsPermissions) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  TempDir t;
  zone(t.path(), "intel-rapl:0", "package-0", 0, 100);
  fs::permissions(t.path() / "intel-rapl:0" / "energy_uj", fs::perms::none);
  EnergyMeter m(t.path());
  EXPECT_FALSE(m.available());
  EXPECT_NE(m.unavailable_reason().find("root only"), std::string::npos) << m.unavailable_reason();
}

TEST(RaplMeter, WrapWithoutAKnownRangeCountsWhatFollows) {
  TempDir t;
  zone(t.path(), "intel-rapl:0", "package-0", 900, 1000);
  fs::remove(t.path() / "intel-rapl:0" / "max_energy_range_uj");
  EnergyMeter m(t.path());
  ASSERT_TRUE(m.available()) << m.unavailable_reason();
  m.start();
  set_energy(t.path(), "intel-rapl:0", 950);  // +50
  m.sample();
  set_energy(t.path(), "intel-rapl:0", 30);  // wrapped, range unknown: +30 (a lower bound)
  EXPECT_NEAR(*m.joules(), 80e-6, 1e-12);
}

TEST(RaplMeter, CounterThatDisappearsMakesItUnavailable) {
  TempDir t;
  zone(t.path(), "intel-rapl:0", "package-0", 10, 100);
  EnergyMeter m(t.path());
  m.start();
  fs::remove(t.path() / "intel-rapl:0" / "energy_uj");
  EXPECT_FALSE(m.joules());
  EXPECT_FALSE(m.available());
  EXPECT_FALSE(m.unavailable_reason().empty());
}

TEST(RaplMeter, ThisMachineEitherReadsOrSaysWhy) {
  EnergyMeter m;
  if (m.available()) {
    m.start();
    EXPECT_GE(*m.joules(), 0.0);
  } else {
    EXPECT_FALSE(m.unavailable_reason().empty());
  }
}

}  // namespace
}  // namespace mixp::train
