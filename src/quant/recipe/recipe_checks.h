// Checks shared by parse_recipe (which adds the line of the offending value) and validate_recipe
// (for recipes built in code), so both reject exactly the same things.
#pragma once

#include <cstdint>
#include <string>

#include "quant/recipe/recipe.h"

namespace lowbit::quant::detail {

// Each returns "" when the value is allowed, else what is wrong with it (no location).
std::string check_block_size(int64_t v);
std::string check_dampening_frac(double v);
std::string check_smoothing_strength(double v);
std::string check_num_calibration_steps(int64_t v);
std::string check_max_batch(int64_t v);
std::string check_n_grid(int64_t n, AwqModifier::DuoScaling duo);

// The checks spanning several fields of one modifier (scheme vs config_groups, observer
// overrides, presets, GPTQ actorder against the scheme, a QuantizationModifier with nothing to
// do). Throws InvalidArgument prefixed by `where` (file, line and modifier).
void check_modifier(const Modifier& m, const std::string& where);

// Recipe-wide rules: unique stage names, each group contiguous within its stage with at most one
// modifier of each type (what YAML can express), and every AWQModifier followed by a quantizing
// modifier. Throws InvalidArgument prefixed by `where`.
void check_structure(const Recipe& r, const std::string& where);

// Field-level checks of a whole modifier (the check_* above), for validate_recipe.
void check_fields(const Modifier& m, const std::string& where);

}  // namespace lowbit::quant::detail
