package contain

// VerifyStored exports verifyStored, the check of one recorded
// acknowledgment that Verify and Activate make.
var VerifyStored = verifyStored

// Classify exports classify.
var Classify = classify
