"""The generated CustomResourceDefinitions, shipped in the wheel as package data."""
