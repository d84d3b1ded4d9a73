// Reduces a recipe (src/quant/recipe) to the steps the pipeline runs (plan.h): stages flattened in
// order; SmoothQuant and AWQ become transform steps; the one quantizing modifier (GPTQModifier or
// QuantizationModifier) must come last. Throws InvalidArgument / Unsupported naming the modifier
// for what the pipeline cannot run (two quantizing modifiers, custom mappings).
#pragma once

#include "quant/pipeline/plan.h"
#include "quant/recipe/recipe.h"

namespace lowbit::quant {

OneshotPlan plan_from_recipe(const Recipe& recipe);

}  // namespace lowbit::quant
