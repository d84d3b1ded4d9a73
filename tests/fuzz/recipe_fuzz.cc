// libFuzzer target: parse_recipe on arbitrary bytes (YAML or JSON, hostile aliases, Python tags,
// odd scalars). Bad input must end in a lowbit::Error. A recipe that parses must also be written
// by recipe_to_yaml and read back unchanged: those steps sit outside the try, so any exception
// they throw escapes and, like a crash, a sanitizer report or a hang, is reported by libFuzzer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/error.h"
#include "quant/recipe/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  lowbit::quant::Recipe recipe;
  try {
    recipe = lowbit::quant::parse_recipe(text, "recipe.yaml");
  } catch (const lowbit::Error&) {
    return 0;
  }
  const std::string yaml = lowbit::quant::recipe_to_yaml(recipe);
  const lowbit::quant::Recipe again = lowbit::quant::parse_recipe(yaml, "lowbit.yaml");
  if (lowbit::quant::recipe_to_yaml(again) != yaml) __builtin_trap();
  // NaN (only possible inside observer_kwargs) is never equal to itself; the text check covers it.
  if (yaml.find(".nan") == std::string::npos && !(again == recipe)) __builtin_trap();
  return 0;
}
