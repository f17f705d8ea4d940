// The torch-free half of image_folder: JPEG/PNG decoding and Pillow's resampling (against PIL
// itself where python3-pil is installed), the folder scan's rules and errors, and the decode
// cache (reuse, invalidation, bad images). Images are written by the test with libpng and
// libjpeg-turbo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/files.h"
#include "trainer/dataset_cache.h"
#include "trainer/image_decode.h"
#include "trainer/image_folder.h"

namespace mpsd::trainer {
namespace {
using mpsd::testing::AsAnotherUser;
using mpsd::testing::ReadFile;
using mpsd::testing::RunsAsAnotherUser;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<uint8_t> RandomRgb(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (uint8_t& p : pixels) p = static_cast<uint8_t>(rng() & 0xFF);
  return pixels;
}

std::vector<uint8_t> SolidRgb(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> pixels;
  for (int i = 0; i < width * height; ++i) pixels.insert(pixels.end(), {r, g, b});
  return pixels;
}

void WritePng(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = PNG_FORMAT_RGB;
  ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr), 0)
      << image.message;
}

std::string JpegBytes(int width, int height, const std::vector<uint8_t>& rgb) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int)
  EXPECT_EQ(
      tjCompress2(handle, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_444, 95, 0),
      0);
  std::string bytes(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("image_folder_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // root/{train,val}/{cat,dog}/: `per_class` images each, PNG and JPEG alternating, of mixed
  // sizes; cats dark, dogs bright.
  std::string MakeFolder(int per_class = 3) {
    const std::string root = (dir_ / "data").string();
    for (const char* split : {"train", "val"}) {
      for (const char* name : {"cat", "dog"}) {
        const fs::path d = fs::path(root) / split / name;
        fs::create_directories(d);
        const uint8_t v = std::string(name) == "cat" ? 30 : 220;
        for (int i = 0; i < per_class; ++i) {
          const int w = 10 + i * 3, h = 8 + i * 2;
          if (i % 2 == 0) {
            WritePng((d / absl::StrCat("im", i, ".png")).string(), w, h, SolidRgb(w, h, v, v, v));
          } else {
            WriteFile((d / absl::StrCat("im", i, ".JPG")).string(),
                      JpegBytes(w, h, SolidRgb(w, h, v, v, v)));
          }
        }
      }
    }
    return root;
  }

  fs::path dir_;
};

TEST_F(ImageFolderTest, DecodesPngExactlyAndJpegClosely) {
  const std::vector<uint8_t> rgb = RandomRgb(7, 5, 1);
  const std::string png = (dir_ / "a.png").string();
  WritePng(png, 7, 5, rgb);
  absl::StatusOr<RgbImage> image = ReadImageFile(png);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 7);
  EXPECT_EQ(image->height, 5);
  EXPECT_EQ(image->pixels, rgb);

  const std::vector<uint8_t> solid = SolidRgb(16, 16, 100, 150, 200);
  absl::StatusOr<RgbImage> jpeg = DecodeImage(JpegBytes(16, 16, solid));
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  for (size_t i = 0; i < solid.size(); ++i) EXPECT_NEAR(jpeg->pixels[i], solid[i], 3) << i;
}

TEST_F(ImageFolderTest, BadFilesAreErrorsNamingTheFile) {
  const std::string jpeg = JpegBytes(32, 32, RandomRgb(32, 32, 2));
  const std::string truncated = (dir_ / "truncated.jpg").string();
  WriteFile(truncated, jpeg.substr(0, jpeg.size() / 2));
  absl::StatusOr<RgbImage> image = ReadImageFile(truncated);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(image.status().message(), HasSubstr(truncated));

  const std::string png = (dir_ / "good.png").string();
  WritePng(png, 9, 9, RandomRgb(9, 9, 3));
  std::string bytes = ReadFile(png);
  bytes[bytes.size() / 2] ^= 0x55;  // a flipped byte inside the compressed data: CRC error
  const std::string corrupt = (dir_ / "corrupt.png").string();
  WriteFile(corrupt, bytes);
  image = ReadImageFile(corrupt);
  ASSERT_FALSE(image.ok());
  EXPECT_THAT(image.status().message(), HasSubstr(corrupt));
  EXPECT_THAT(image.status().message(), HasSubstr("PNG"));

  const std::string text = (dir_ / "notes.png").string();
  WriteFile(text, "not an image at all");
  EXPECT_THAT(ReadImageFile(text).status().message(), HasSubstr("not a JPEG or PNG file"));
  WriteFile(text, "");
  EXPECT_THAT(ReadImageFile(text).status().message(), HasSubstr("empty file"));
  EXPECT_THAT(ReadImageFile((dir_ / "missing.png").string()).status().message(),
              HasSubstr("missing.png: cannot read"));

  // A PNG header claiming 100000 × 100000 pixels is refused before anything is allocated.
  std::string huge = ReadFile(png);
  for (int i = 0; i < 2; ++i) {  // IHDR's width and height, big-endian, at bytes 16 and 20
    const uint32_t v = 100000;
    for (int b = 0; b < 4; ++b)
      huge[16 + i * 4 + b] = static_cast<char>((v >> (24 - 8 * b)) & 0xFF);
  }
  image = DecodeImage(huge);
  ASSERT_FALSE(image.ok());
}

// Issue 26: a FIFO named like an image hung the job that read it (open waits for a writer). The
// scan lists it unopened as not a regular file; read anyway (put in place after the scan), it
// is refused at once.
TEST_F(ImageFolderTest, AFifoIsListedAsNotARegularFileAndNeverWaitedFor) {
  for (const char* split : {"train/red", "val/red"}) fs::create_directories(dir_ / split);
  WritePng((dir_ / "train/red/a.png").string(), 4, 4, RandomRgb(4, 4, 1));
  WritePng((dir_ / "val/red/a.png").string(), 4, 4, RandomRgb(4, 4, 1));
  const std::string fifo = (dir_ / "train/red/zz.png").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  absl::StatusOr<ImageFolderListing> listing = ScanImageFolder(dir_.string());
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->train.files.size(), 2u);
  EXPECT_EQ(listing->train.files[1].path, fifo);
  EXPECT_EQ(listing->train.files[1].size_bytes, -1);
  EXPECT_EQ(listing->train.files[1].error, "not a regular file (a FIFO)");
  absl::StatusOr<RgbImage> image = ReadImageFile(fifo);
  ASSERT_FALSE(image.ok());
  EXPECT_THAT(image.status().message(), HasSubstr(fifo + ": not a regular file"));
}

// Issue 26: an image folder mpsd's user cannot search "does not exist"; an unreadable image
// failed the job as INTERNAL. Both say permission denied, naming the path, and the image's
// error is a dataset error (FAILED_PRECONDITION: DATASET_ERROR).
TEST_F(ImageFolderTest, UnreadableFoldersAndImagesSayPermissionDenied) {
  const std::string locked = (dir_ / "locked").string();
  fs::create_directories(locked + "/colours/train/red");
  const std::string image = (dir_ / "secret.png").string();
  WritePng(image, 4, 4, RandomRgb(4, 4, 1));
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(locked.c_str(), 0700), 0);
  ASSERT_EQ(chmod(image.c_str(), 0600), 0);
  if (!RunsAsAnotherUser()) {
    ASSERT_EQ(chmod(locked.c_str(), 0), 0);
    ASSERT_EQ(chmod(image.c_str(), 0), 0);
  }
  const std::string errors = AsAnotherUser([&] {
    const absl::Status scan = ScanImageFolder(locked + "/colours").status();
    const absl::Status read = ReadImageFile(image).status();
    return absl::StrCat(absl::StatusCodeToString(scan.code()), " ", scan.message(), "\n",
                        absl::StatusCodeToString(read.code()), " ", read.message());
  });
  chmod(locked.c_str(), 0700);
  EXPECT_THAT(errors, HasSubstr("FAILED_PRECONDITION " + locked +
                                "/colours: permission denied: "
                                "mpsd's user cannot search a folder on its path"));
  EXPECT_THAT(errors, HasSubstr("FAILED_PRECONDITION " + image +
                                ": cannot read: Permission "
                                "denied"));
}

TEST_F(ImageFolderTest, ResizeMatchesPillowBilinear) {
  const char* python = MPSD_PIL_PYTHON;
  if (std::string(python).empty()) GTEST_SKIP() << "no python3 with PIL (python3-pil)";
  const std::string png = (dir_ / "src.png").string();
  WritePng(png, 37, 23, RandomRgb(37, 23, 4));
  const std::string expected = (dir_ / "expected.raw").string();
  const std::string script =
      absl::StrCat(python, " -c \"from PIL import Image; im = Image.open('", png,
                   "').convert('RGB'); out = open('", expected, "', 'wb'); ",
                   "out.write(im.resize((16, 12), Image.BILINEAR).tobytes()); ",
                   "out.write(im.resize((50, 40), Image.BILINEAR).convert('L').tobytes())\"");
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
  const std::string pil = ReadFile(expected);
  ASSERT_EQ(pil.size(), 16u * 12 * 3 + 50u * 40);

  absl::StatusOr<RgbImage> image = ReadImageFile(png);
  ASSERT_TRUE(image.ok());
  std::vector<uint8_t> down(3 * 12 * 16);
  ResizeInto(*image, 12, 16, 3, down.data());  // planar [3, 12, 16]; PIL's is interleaved
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 12 * 16; ++i) {
      ASSERT_EQ(down[c * 12 * 16 + i], static_cast<uint8_t>(pil[i * 3 + c])) << c << " " << i;
    }
  }
  std::vector<uint8_t> up(40 * 50);
  ResizeInto(*image, 40, 50, 1, up.data());
  for (int i = 0; i < 40 * 50; ++i) {
    ASSERT_EQ(up[i], static_cast<uint8_t>(pil[16 * 12 * 3 + i])) << i;
  }
}

TEST_F(ImageFolderTest, ScanFollowsImageFolderRules) {
  const std::string root = MakeFolder();
  WriteFile(root + "/train/cat/readme.txt", "skipped");
  fs::create_directories(root + "/train/cat/nested");
  WritePng(root + "/train/cat/nested/deep.png", 4, 4, RandomRgb(4, 4, 5));
  absl::StatusOr<ImageFolderListing> listing = ScanImageFolder(root);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_THAT(listing->classes, ::testing::ElementsAre("cat", "dog"));
  ASSERT_EQ(listing->train.files.size(), 7u);
  EXPECT_EQ(listing->train.files[0].path, root + "/train/cat/im0.png");
  EXPECT_EQ(listing->train.files[1].path, root + "/train/cat/im1.JPG");  // any case
  EXPECT_EQ(listing->train.files[3].path, root + "/train/cat/nested/deep.png");
  EXPECT_EQ(listing->train.files[4].label, 1);
  EXPECT_EQ(listing->train.other_files, 1);
  EXPECT_EQ(listing->test.dir, root + "/val");
  EXPECT_EQ(listing->test.files.size(), 6u);
}

TEST_F(ImageFolderTest, ScanErrorsNameTheDirectory) {
  const std::string root = MakeFolder();
  EXPECT_THAT(ScanImageFolder(root + "/nope").status().message(),
              HasSubstr("directory " + root + "/nope does not exist"));

  fs::rename(root + "/val/dog", root + "/val/wolf");
  absl::Status s = ScanImageFolder(root).status();
  EXPECT_THAT(s.message(), HasSubstr(root + "/val: class \"wolf\" is not a class"));
  fs::create_directories(root + "/val/dog");
  WritePng(root + "/val/dog/a.png", 4, 4, RandomRgb(4, 4, 6));
  fs::remove_all(root + "/val/wolf");
  ASSERT_TRUE(ScanImageFolder(root).ok());

  fs::remove_all(root + "/val/dog");
  EXPECT_THAT(ScanImageFolder(root).status().message(),
              HasSubstr(root + "/val: class \"dog\" of the training split has no directory"));
  fs::create_directories(root + "/val/dog");  // now empty
  EXPECT_THAT(ScanImageFolder(root).status().message(),
              HasSubstr(root + "/val/dog: no .jpg, .jpeg or .png file"));
  WritePng(root + "/val/dog/a.png", 4, 4, RandomRgb(4, 4, 6));

  fs::create_directory_symlink(root + "/train/cat", root + "/train/cat/loop");
  EXPECT_THAT(ScanImageFolder(root).status().message(),
              HasSubstr(root + "/train/cat/loop: symlink loop"));
  fs::remove(root + "/train/cat/loop");

  fs::create_symlink(root + "/gone.png", root + "/train/cat/dangling.png");
  absl::StatusOr<ImageFolderListing> listing = ScanImageFolder(root);
  ASSERT_TRUE(listing.ok()) << listing.status();
  bool found = false;
  for (const ImageFile& f : listing->train.files) {
    if (f.path == root + "/train/cat/dangling.png") {
      found = true;
      EXPECT_EQ(f.size_bytes, -1);
      EXPECT_THAT(f.error, HasSubstr("No such file"));
    }
  }
  EXPECT_TRUE(found);
  fs::remove(root + "/train/cat/dangling.png");

  fs::rename(root + "/val", root + "/elsewhere");
  EXPECT_THAT(ScanImageFolder(root).status().message(), HasSubstr("has neither val/ nor test/"));
  fs::rename(root + "/elsewhere", root + "/test");
  EXPECT_EQ(ScanImageFolder(root)->test.dir, root + "/test");
  fs::remove_all(root + "/train");
  fs::create_directories(root + "/train");
  EXPECT_THAT(ScanImageFolder(root).status().message(), HasSubstr("no class directory"));
}

ImageDecodeOptions Options() {
  ImageDecodeOptions options;
  options.height = 6;
  options.width = 8;
  options.threads = 2;
  return options;
}

TEST_F(ImageFolderTest, CacheIsReusedAndRebuiltWhenFilesChange) {
  const std::string root = MakeFolder();
  const std::string cache = (dir_ / "cache").string();
  absl::StatusOr<ImageFolderListing> listing = ScanImageFolder(root);
  ASSERT_TRUE(listing.ok());
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> first =
      LoadDecodedSplit(*listing, listing->train, Options(), cache);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE((*first)->reused());
  EXPECT_EQ((*first)->count(), 6);
  EXPECT_EQ((*first)->decode_threads(), 2);
  EXPECT_EQ((fs::status(cache).permissions() & fs::perms::all), fs::perms::owner_all);
  // Solid images: cats 30, dogs 220 in every channel (JPEG within a few levels).
  const uint8_t* pixels = (*first)->pixels();
  EXPECT_EQ(pixels[0], 30);
  EXPECT_NEAR(pixels[5 * 3 * 6 * 8 + 17], 220, 3);
  EXPECT_THAT(std::vector<int64_t>((*first)->labels(), (*first)->labels() + 6),
              ::testing::ElementsAre(0, 0, 0, 1, 1, 1));
  EXPECT_NEAR((*first)->mean()[0], (30 + 220) / 2.0 / 255, 0.01);
  EXPECT_NEAR((*first)->std()[0], (220 - 30) / 2.0 / 255, 0.01);

  absl::StatusOr<std::shared_ptr<const DecodedSplit>> second =
      LoadDecodedSplit(*listing, listing->train, Options(), cache);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE((*second)->reused());
  EXPECT_EQ((*second)->cache_path(), (*first)->cache_path());
  EXPECT_EQ(std::memcmp((*second)->pixels(), (*first)->pixels(), 6 * 3 * 6 * 8), 0);
  EXPECT_EQ((*second)->mean(), (*first)->mean());

  // Another size is another cache; a rewritten file (new size and mtime) makes the old stale.
  ImageDecodeOptions bigger = Options();
  bigger.height = 7;
  EXPECT_FALSE((*LoadDecodedSplit(*listing, listing->train, bigger, cache))->reused());
  WritePng(root + "/train/cat/im0.png", 5, 5, SolidRgb(5, 5, 90, 90, 90));
  listing = ScanImageFolder(root);
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> third =
      LoadDecodedSplit(*listing, listing->train, Options(), cache);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE((*third)->reused());
  EXPECT_EQ((*third)->cache_path(), (*first)->cache_path());  // replaced in place
  EXPECT_EQ((*third)->pixels()[0], 90);
  // A file added: stale again.
  WritePng(root + "/train/dog/new.png", 5, 5, SolidRgb(5, 5, 200, 200, 200));
  listing = ScanImageFolder(root);
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> fourth =
      LoadDecodedSplit(*listing, listing->train, Options(), cache);
  EXPECT_FALSE((*fourth)->reused());
  EXPECT_EQ((*fourth)->count(), 7);
  // A damaged cache file is rebuilt, not trusted.
  ::truncate((*fourth)->cache_path().c_str(), 5000);
  EXPECT_FALSE((*LoadDecodedSplit(*listing, listing->train, Options(), cache))->reused());
  // Without a cache directory: decoded into memory.
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> memory =
      LoadDecodedSplit(*listing, listing->train, Options(), "");
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ((*memory)->cache_path(), "");
  EXPECT_EQ((*memory)->count(), 7);
}

TEST_F(ImageFolderTest, BadImagesFailOrAreSkipped) {
  const std::string root = MakeFolder();
  const std::string bad = root + "/train/cat/im2.png";
  WriteFile(bad, ReadFile(bad).substr(0, 40));  // truncated
  absl::StatusOr<ImageFolderListing> listing = ScanImageFolder(root);
  ASSERT_TRUE(listing.ok());
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> failed =
      LoadDecodedSplit(*listing, listing->train, Options(), (dir_ / "cache").string());
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr(bad));
  EXPECT_TRUE(fs::is_empty(dir_ / "cache"));  // no temporary left behind

  ImageDecodeOptions skip = Options();
  skip.skip_bad_images = true;
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> skipped =
      LoadDecodedSplit(*listing, listing->train, skip, (dir_ / "cache").string());
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ((*skipped)->count(), 5);
  EXPECT_EQ((*skipped)->skipped(), 1);
  ASSERT_EQ((*skipped)->skipped_errors().size(), 1u);
  EXPECT_THAT((*skipped)->skipped_errors()[0], HasSubstr(bad));
  EXPECT_THAT(std::vector<int64_t>((*skipped)->labels(), (*skipped)->labels() + 5),
              ::testing::ElementsAre(0, 0, 1, 1, 1));
  EXPECT_NEAR((*skipped)->pixels()[2 * 3 * 6 * 8], 220, 3);  // row 2 is the first dog now
  EXPECT_EQ(
      (*LoadDecodedSplit(*listing, listing->train, skip, (dir_ / "cache").string()))->skipped(),
      1);  // stored with the cache

  // Every file bad: nothing to train on.
  for (const ImageFile& f : listing->test.files) WriteFile(f.path, "garbage");
  absl::StatusOr<std::shared_ptr<const DecodedSplit>> none =
      LoadDecodedSplit(*listing, listing->test, skip, "");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("none of its 6 image files could be decoded"));
}

}  // namespace
}  // namespace mpsd::trainer
