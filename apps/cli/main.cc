#include <cstdio>
int main() { std::puts("lowbit"); return 0; }
