// Tests for api/default_address.h: the address mpsd and its clients agree on.
#include "api/default_address.h"

#include <gtest/gtest.h>

namespace mpsd::api {
namespace {

TEST(DefaultAddressTest, ExplicitAddressWins) {
  EXPECT_EQ(DefaultServerAddressFor("localhost:7070", "/run/user/1000", 1000), "localhost:7070");
}

TEST(DefaultAddressTest, RuntimeDirWhenSet) {
  EXPECT_EQ(DefaultServerAddressFor(nullptr, "/run/user/1000", 1000),
            "unix:///run/user/1000/mpsd/mpsd.sock");
  EXPECT_EQ(DefaultServerAddressFor("", "/run/user/1000", 1000),
            "unix:///run/user/1000/mpsd/mpsd.sock");
  EXPECT_EQ(DefaultSocketPathFor("/run/user/1000", 1000), "/run/user/1000/mpsd/mpsd.sock");
}

TEST(DefaultAddressTest, TmpPerUserOtherwise) {
  EXPECT_EQ(DefaultServerAddressFor(nullptr, nullptr, 501), "unix:///tmp/mpsd-501/mpsd.sock");
  EXPECT_EQ(DefaultServerAddressFor(nullptr, "", 501), "unix:///tmp/mpsd-501/mpsd.sock");
}

}  // namespace
}  // namespace mpsd::api
